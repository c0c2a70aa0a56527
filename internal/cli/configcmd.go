package cli

import (
	"encoding/json"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferry-fs/ferry/internal/config"
)

// secretEnv are environment variables whose values are never printed.
var secretEnv = []string{"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING"}

func newConfigCmd(stdio IO) *cobra.Command {
	cfg := config.Defaults()
	cmd := &cobra.Command{
		Use:   "config",
		Short: "print the effective configuration (secrets redacted)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd.Flags(), &cfg, stdio.Getenv); err != nil {
				return err
			}
			out := map[string]any{"config": cfg}
			env := map[string]string{}
			for _, k := range []string{"AWS_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "FUSION_AWS_REGION",
				"AWS_ACCESS_KEY_ID", "STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_ACCOUNT",
				"FUSION_WORK", "FUSION_TAGS", "FUSION_AWS_SERVER_SIDE_ENCRYPTION", "FUSION_AWS_SSEKMS_KEY_ID", "FUSION_AZ_MSI_CLIENT_ID"} {
				if v := stdio.Getenv(k); v != "" {
					env[k] = v
				}
			}
			for _, k := range secretEnv {
				if stdio.Getenv(k) != "" {
					env[k] = "<redacted>"
				}
			}
			if v, ok := env["AWS_ACCESS_KEY_ID"]; ok && len(v) > 4 {
				env["AWS_ACCESS_KEY_ID"] = v[:4] + strings.Repeat("*", len(v)-4)
			}
			out["environment"] = env
			enc := json.NewEncoder(stdio.Stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false) // "<redacted>", not "\u003credacted\u003e"
			return enc.Encode(out)
		},
	}
	bindFlags(cmd.Flags(), &cfg)
	return cmd
}
