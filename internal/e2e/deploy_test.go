package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ferry-fs/ferry/internal/testenv"
)

// defaultCacheDir is ferry's cache dir when none is configured
// ($TMPDIR/ferry-cache with TMPDIR unset in a container).
const defaultCacheDir = "/tmp/ferry-cache"

// deployFile reads a file of deploy/ (or of the repository root).
func deployFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cacheDirOf is the cache dir a task environment selects (the flag's
// environment fallbacks, in order).
func cacheDirOf(env map[string]string) string {
	for _, k := range []string{"FERRY_CACHE_DIR", "FUSION_CACHE_LOCATION"} {
		if v := env[k]; v != "" {
			return v
		}
	}
	return defaultCacheDir
}

// under reports whether path is dir or below it.
func under(path, dir string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// wrapsWithFerry reports whether argv starts the task through ferry.
func wrapsWithFerry(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	switch filepath.Base(argv[0]) {
	case "fusion":
		return len(argv) > 1
	case "ferry":
		return len(argv) > 2 && argv[1] == "run"
	}
	return false
}

type k8sContainer struct {
	Name    string
	Image   string
	Command []string
	Args    []string
	Env     []struct {
		Name  string
		Value string
	}
	Resources struct {
		Limits map[string]any
	}
	SecurityContext struct {
		Privileged   bool
		Capabilities struct {
			Add []string
		}
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sPod struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   struct{ Name string }
	Spec       struct {
		Containers []k8sContainer
		Volumes    []struct {
			Name     string
			EmptyDir *struct{} `yaml:"emptyDir"`
			HostPath *struct {
				Path string
			} `yaml:"hostPath"`
		}
	}
}

type batchJob struct {
	JobDefinitionName   string `json:"jobDefinitionName"`
	Type                string `json:"type"`
	ContainerProperties struct {
		Image       string   `json:"image"`
		Command     []string `json:"command"`
		Privileged  bool     `json:"privileged"`
		Environment []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"environment"`
		Volumes []struct {
			Name string `json:"name"`
			Host *struct {
				SourcePath string `json:"sourcePath"`
			} `json:"host"`
		} `json:"volumes"`
		MountPoints []struct {
			SourceVolume  string `json:"sourceVolume"`
			ContainerPath string `json:"containerPath"`
			ReadOnly      bool   `json:"readOnly"`
		} `json:"mountPoints"`
	} `json:"containerProperties"`
}

// TestDeploy checks the deploy/ examples for what ferry needs in a task
// container: an image, the task command wrapped by /usr/bin/fusion (or
// ferry run), /dev/fuse with CAP_SYS_ADMIN, a cache on a real volume, and
// /usr/bin/fusion present.
func TestDeploy(t *testing.T) {
	t.Parallel()
	t.Run("kubernetes", testDeployKubernetes)
	t.Run("aws-batch", testDeployBatch)
	t.Run("nextflow", testDeployNextflow)
	t.Run("docker", testDeployDocker)
	t.Run("readme", testDeployReadme)
}

func testDeployKubernetes(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader(deployFile(t, "deploy/kubernetes/pod.yaml")))
	var pods []k8sPod
	for {
		var p k8sPod
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("pod.yaml: %v", err)
		}
		pods = append(pods, p)
	}
	if len(pods) == 0 {
		t.Fatal("pod.yaml: no documents")
	}
	for _, p := range pods {
		if p.APIVersion != "v1" || p.Kind != "Pod" || p.Metadata.Name == "" {
			t.Errorf("%q: apiVersion %q kind %q", p.Metadata.Name, p.APIVersion, p.Kind)
		}
		vols := map[string]bool{}
		for _, v := range p.Spec.Volumes {
			vols[v.Name] = v.EmptyDir != nil || v.HostPath != nil
		}
		wrapped := 0
		for _, c := range p.Spec.Containers {
			if !wrapsWithFerry(append(slices.Clone(c.Command), c.Args...)) {
				continue
			}
			wrapped++
			if c.Image == "" {
				t.Errorf("%s/%s: no image", p.Metadata.Name, c.Name)
			}
			fuseLimit := false
			for k := range c.Resources.Limits {
				fuseLimit = fuseLimit || strings.HasSuffix(k, "/fuse")
			}
			if !c.SecurityContext.Privileged && !(fuseLimit && slices.Contains(c.SecurityContext.Capabilities.Add, "SYS_ADMIN")) {
				t.Errorf("%s/%s: neither privileged nor a FUSE device resource with SYS_ADMIN", p.Metadata.Name, c.Name)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
			cache := cacheDirOf(env)
			onVolume := false
			for _, m := range c.VolumeMounts {
				if _, ok := vols[m.Name]; !ok {
					t.Errorf("%s/%s: mount of undeclared volume %q", p.Metadata.Name, c.Name, m.Name)
				}
				onVolume = onVolume || (vols[m.Name] && under(cache, m.MountPath))
			}
			if !onVolume {
				t.Errorf("%s/%s: cache dir %s is not on an emptyDir or hostPath volume", p.Metadata.Name, c.Name, cache)
			}
		}
		if wrapped == 0 {
			t.Errorf("%s: no container runs its command through /usr/bin/fusion or ferry run", p.Metadata.Name)
		}
	}
}

func testDeployBatch(t *testing.T) {
	var j batchJob
	dec := json.NewDecoder(bytes.NewReader(deployFile(t, "deploy/aws-batch/job-definition.json")))
	if err := dec.Decode(&j); err != nil {
		t.Fatalf("job-definition.json: %v", err)
	}
	c := j.ContainerProperties
	if j.JobDefinitionName == "" || j.Type != "container" || c.Image == "" {
		t.Errorf("name %q type %q image %q", j.JobDefinitionName, j.Type, c.Image)
	}
	if !wrapsWithFerry(c.Command) {
		t.Errorf("command %q does not start with /usr/bin/fusion", c.Command)
	}
	// Batch job definitions have no capability list: FUSE needs privileged.
	if !c.Privileged {
		t.Errorf("not privileged: no /dev/fuse and CAP_SYS_ADMIN")
	}
	hostVols := map[string]bool{}
	for _, v := range c.Volumes {
		hostVols[v.Name] = v.Host != nil && v.Host.SourcePath != ""
	}
	env := map[string]string{}
	for _, e := range c.Environment {
		env[e.Name] = e.Value
	}
	cache := cacheDirOf(env)
	onVolume := false
	for _, m := range c.MountPoints {
		host, ok := hostVols[m.SourceVolume]
		if !ok {
			t.Errorf("mount point %s: undeclared volume %q", m.ContainerPath, m.SourceVolume)
		}
		if m.ContainerPath == "/usr/bin/fusion" && (!host || !m.ReadOnly) {
			t.Errorf("/usr/bin/fusion should be a read-only host volume")
		}
		onVolume = onVolume || (host && !m.ReadOnly && under(cache, m.ContainerPath))
	}
	if !onVolume {
		t.Errorf("cache dir %s is not on a writable host volume", cache)
	}
}

// nextflowSetting finds "name = value" (or "name = value" inside a
// "scope { }" block) in a Nextflow config with comments removed.
func nextflowSetting(cfg, scope, name string) (string, bool) {
	dotted := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(scope+"."+name) + `\s*=\s*(.+?)\s*$`)
	if m := dotted.FindStringSubmatch(cfg); m != nil {
		return m[1], true
	}
	block := regexp.MustCompile(`(?s)(?:^|\n)\s*` + regexp.QuoteMeta(scope) + `\s*\{(.*?)\n\s*\}`)
	if m := block.FindStringSubmatch(cfg); m != nil {
		inner := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(name) + `\s*=\s*(.+?)\s*$`)
		if v := inner.FindStringSubmatch(m[1]); v != nil {
			return v[1], true
		}
	}
	return "", false
}

func testDeployNextflow(t *testing.T) {
	comments := regexp.MustCompile(`(?m)^\s*//.*$|\s//.*$`)
	for _, tc := range []struct {
		file string
		want map[[2]string]*regexp.Regexp // {scope, name} -> value
	}{
		{"deploy/nextflow/nextflow.config", map[[2]string]*regexp.Regexp{
			{"fusion", "enabled"}:    regexp.MustCompile(`^true$`),
			{"wave", "enabled"}:      regexp.MustCompile(`^false$`),
			{"docker", "enabled"}:    regexp.MustCompile(`^true$`),
			{"docker", "runOptions"}: regexp.MustCompile(`--device /dev/fuse.*--cap-add SYS_ADMIN.*:/usr/bin/fusion:ro`),
		}},
		{"deploy/nextflow/wave.config", map[[2]string]*regexp.Regexp{
			{"fusion", "enabled"}:            regexp.MustCompile(`^true$`),
			{"fusion", "containerConfigUrl"}: regexp.MustCompile(`^'https://[^']+\.json'$`),
			{"wave", "enabled"}:              regexp.MustCompile(`^true$`),
			{"docker", "runOptions"}:         regexp.MustCompile(`--device /dev/fuse.*--cap-add SYS_ADMIN`),
		}},
	} {
		cfg := comments.ReplaceAllString(string(deployFile(t, tc.file)), "")
		for k, re := range tc.want {
			v, ok := nextflowSetting(cfg, k[0], k[1])
			if !ok || !re.MatchString(v) {
				t.Errorf("%s: %s.%s = %q (set %v), want %v", tc.file, k[0], k[1], v, ok, re)
			}
		}
		if !regexp.MustCompile(`(?m)^workDir\s*=\s*'s3://`).MatchString(cfg) {
			t.Errorf("%s: no s3:// workDir (Fusion needs an object-storage work dir)", tc.file)
		}
	}
}

// finalStage returns the instructions of a Dockerfile's last stage, line
// continuations joined, comments dropped.
func finalStage(dockerfile string) []string {
	var out []string
	joined := strings.ReplaceAll(dockerfile, "\\\n", " ")
	for _, l := range strings.Split(joined, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			out = nil
		}
		out = append(out, l)
	}
	return out
}

func testDeployDocker(t *testing.T) {
	run := "deploy/docker/run.sh"
	if out, err := exec.Command("sh", "-n", filepath.Join(testenv.RepoRoot(), run)).CombinedOutput(); err != nil {
		t.Errorf("%s: sh -n: %v\n%s", run, err, out)
	}
	for _, s := range []string{"--device /dev/fuse", "--cap-add SYS_ADMIN", "/usr/bin/fusion"} {
		if !bytes.Contains(deployFile(t, run), []byte(s)) {
			t.Errorf("%s lacks %s", run, s)
		}
	}
	// The from-source image and `make image` must ship the same final stage.
	want := []string{"FROM scratch", "", `ENTRYPOINT ["/usr/bin/fusion"]`}
	for _, f := range []string{"Dockerfile", "deploy/docker/Dockerfile.prebuilt"} {
		got := finalStage(string(deployFile(t, f)))
		if len(got) != 3 || got[0] != want[0] || !strings.HasPrefix(got[1], "COPY ") || got[2] != want[2] {
			t.Errorf("%s final stage = %q, want FROM scratch, one COPY, %s", f, got, want[2])
		}
	}
	task := finalStage(string(deployFile(t, "deploy/docker/Dockerfile.task")))
	if !slices.Contains(task, "COPY --from=ferry /usr/bin/ /usr/bin/") {
		t.Errorf("Dockerfile.task final stage %q does not copy ferry's /usr/bin", task)
	}
}

// testDeployReadme: deploy/README.md names every file of deploy/.
func testDeployReadme(t *testing.T) {
	readme := string(deployFile(t, "deploy/README.md"))
	root := filepath.Join(testenv.RepoRoot(), "deploy")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "README.md" {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if !strings.Contains(readme, "`"+rel+"`") {
			t.Errorf("deploy/README.md does not mention `%s`", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
