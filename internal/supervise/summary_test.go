package supervise

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

func TestSummaryJSON(t *testing.T) {
	tests := []struct {
		name string
		in   Summary
		want map[string]any
	}{
		{
			name: "full",
			in: Summary{
				ExitCode: 3, WallSeconds: 10, TaskSeconds: 8.5, DrainSeconds: 1.25,
				BytesReadCache: 1 << 20, BytesReadNetwork: 2 << 20, BytesDownloaded: 3 << 20,
				BytesUploaded: 4 << 20, ObjectsUploaded: 2, Retries: 5, Errors: 1, NotDurableFiles: 0,
			},
			want: map[string]any{
				"type": SummaryType, "exit_code": 3.0, "wall_seconds": 10.0, "task_seconds": 8.5,
				"drain_seconds": 1.25, "bytes_read_cache": float64(1 << 20), "bytes_read_network": float64(2 << 20),
				"bytes_downloaded": float64(3 << 20), "bytes_uploaded": float64(4 << 20),
				"objects_uploaded": 2.0, "retries": 5.0, "errors": 1.0, "not_durable_files": 0.0,
				"compute_seconds": 0.0, "efficiency": 0.0,
			},
		},
		{
			name: "efficiency",
			in:   Summary{WallSeconds: 4, UserSeconds: 2.5, SysSeconds: 0.5, ComputeSeconds: 3},
			want: map[string]any{"efficiency": 0.75, "cpu_user_seconds": 2.5, "cpu_sys_seconds": 0.5, "compute_seconds": 3.0},
		},
		{
			name: "no wall time",
			in:   Summary{ComputeSeconds: 3},
			want: map[string]any{"efficiency": 0.0},
		},
		{
			name: "rounding",
			in:   Summary{WallSeconds: 3, ComputeSeconds: 1, DrainSeconds: 0.123456},
			want: map[string]any{"efficiency": 0.3333, "drain_seconds": 0.123},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.in.JSON()
			if !bytes.HasPrefix(b, []byte("{")) || !bytes.HasSuffix(b, []byte("}\n")) || bytes.Count(b, []byte("\n")) != 1 {
				t.Fatalf("not one JSON line: %q", b)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
		})
	}
}

func TestSetCPU(t *testing.T) {
	var s Summary
	s.SetCPU(CPUTimes{User: 1500 * time.Millisecond, Sys: 500 * time.Millisecond})
	s.WallSeconds = 4
	s.Finalize()
	if s.UserSeconds != 1.5 || s.SysSeconds != 0.5 || s.ComputeSeconds != 2 || s.Efficiency != 0.5 {
		t.Errorf("got %+v", s)
	}
}

// TestTaskCPU runs a child that burns CPU and checks its time is seen,
// and is not counted twice (own rusage and RUSAGE_CHILDREN overlap).
func TestTaskCPU(t *testing.T) {
	before, err := ChildrenCPU()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`)
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	wall := time.Since(t0)
	c := TaskCPU(cmd.ProcessState, before)
	if c.Total() <= 0 {
		t.Fatalf("no CPU time measured: %+v", c)
	}
	// One single-threaded shell cannot use more CPU than wall time (a
	// double count would).
	if c.Total() > wall+50*time.Millisecond {
		t.Errorf("CPU %v exceeds wall %v: counted twice?", c.Total(), wall)
	}
	// RUSAGE_CHILDREN sums what the kernel adjusted per child at reap
	// time, so it may differ from the child's own rusage by microseconds
	// (207.815 ms against 207.834 ms under load).
	if got := TaskCPU(nil, before); got.Total() < c.Total()-time.Millisecond {
		t.Errorf("without the process state: %v, want >= %v", got.Total(), c.Total())
	}
}
