package s3

import (
	"strings"
	"testing"
	"time"
)

func TestConfigFromEnv(t *testing.T) {
	yes := true
	tests := []struct {
		name string
		env  map[string]string
		want Config
	}{
		{
			name: "nothing set",
			want: Config{Region: "us-east-1"},
		},
		{
			name: "nextflow endpoint wins",
			env: map[string]string{
				"AWS_S3_ENDPOINT":     "http://minio:9000",
				"AWS_ENDPOINT_URL_S3": "http://other:1",
				"AWS_ENDPOINT_URL":    "http://other:2",
			},
			want: Config{Endpoint: "http://minio:9000", Region: "us-east-1", PathStyle: &yes},
		},
		{
			name: "service endpoint before global",
			env:  map[string]string{"AWS_ENDPOINT_URL_S3": "http://s3only:1", "AWS_ENDPOINT_URL": "http://global:2"},
			want: Config{Endpoint: "http://s3only:1", Region: "us-east-1", PathStyle: &yes},
		},
		{
			name: "global endpoint",
			env:  map[string]string{"AWS_ENDPOINT_URL": "https://global"},
			want: Config{Endpoint: "https://global", Region: "us-east-1", PathStyle: &yes},
		},
		{
			name: "blank values are unset",
			env:  map[string]string{"AWS_S3_ENDPOINT": "  ", "AWS_REGION": ""},
			want: Config{Region: "us-east-1"},
		},
		{
			name: "AWS_REGION first",
			env:  map[string]string{"AWS_REGION": "eu-west-1", "FUSION_AWS_REGION": "eu-west-2", "AWS_DEFAULT_REGION": "eu-west-3"},
			want: Config{Region: "eu-west-1"},
		},
		{
			name: "FUSION_AWS_REGION before AWS_DEFAULT_REGION",
			env:  map[string]string{"FUSION_AWS_REGION": "eu-west-2", "AWS_DEFAULT_REGION": "eu-west-3"},
			want: Config{Region: "eu-west-2"},
		},
		{
			name: "AWS_DEFAULT_REGION last",
			env:  map[string]string{"AWS_DEFAULT_REGION": "eu-west-3"},
			want: Config{Region: "eu-west-3"},
		},
		{
			name: "SSE-S3",
			env:  map[string]string{"FUSION_AWS_SERVER_SIDE_ENCRYPTION": "AES256"},
			want: Config{Region: "us-east-1", SSE: SSES3},
		},
		{
			name: "SSE-KMS with key",
			env: map[string]string{
				"FUSION_AWS_SERVER_SIDE_ENCRYPTION": "aws:kms",
				"FUSION_AWS_SSEKMS_KEY_ID":          "arn:aws:kms:eu-west-1:1:key/abc",
			},
			want: Config{Region: "us-east-1", SSE: SSEKMS, SSEKMSKeyID: "arn:aws:kms:eu-west-1:1:key/abc"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := configFromEnv(func(k string) string { return tt.env[k] })
			if got.String() != tt.want.String() {
				t.Errorf("configFromEnv =\n %v\nwant\n %v", got, tt.want)
			}
		})
	}
}

func TestConfigFromEnvReadsProcessEnv(t *testing.T) {
	t.Setenv("AWS_S3_ENDPOINT", "http://127.0.0.1:9")
	t.Setenv("AWS_REGION", "ap-south-1")
	c := ConfigFromEnv()
	if c.Endpoint != "http://127.0.0.1:9" || c.Region != "ap-south-1" || c.PathStyle == nil || !*c.PathStyle {
		t.Fatalf("ConfigFromEnv = %v", c)
	}
}

func TestConfigNormalized(t *testing.T) {
	yes, no := true, false
	tests := []struct {
		name    string
		in      Config
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "no bucket", in: Config{}, wantErr: "Bucket is empty"},
		{name: "AWS defaults", in: Config{Bucket: "b"}, check: func(t *testing.T, c Config) {
			if *c.PathStyle || c.MultipartChecksums != nil || c.RequestTimeout != DefaultRequestTimeout {
				t.Errorf("got %v", c)
			}
		}},
		{name: "custom endpoint defaults", in: Config{Bucket: "b", Endpoint: "http://minio:9000/"}, check: func(t *testing.T, c Config) {
			if !*c.PathStyle || c.MultipartChecksums != nil || c.Endpoint != "http://minio:9000" {
				t.Errorf("got %v", c)
			}
		}},
		{name: "explicit choices kept", in: Config{Bucket: "b", Endpoint: "http://m", PathStyle: &no, MultipartChecksums: &yes}, check: func(t *testing.T, c Config) {
			if *c.PathStyle || !*c.MultipartChecksums {
				t.Errorf("got %v", c)
			}
		}},
		{name: "endpoint without scheme", in: Config{Bucket: "b", Endpoint: "storage.example.com"}, check: func(t *testing.T, c Config) {
			if c.Endpoint != "https://storage.example.com" {
				t.Errorf("Endpoint = %q", c.Endpoint)
			}
		}},
		{name: "KMS key implies aws:kms", in: Config{Bucket: "b", SSEKMSKeyID: "k"}, check: func(t *testing.T, c Config) {
			if c.SSE != SSEKMS {
				t.Errorf("SSE = %q", c.SSE)
			}
		}},
		{name: "unknown SSE", in: Config{Bucket: "b", SSE: "rot13"}, wantErr: "server-side encryption"},
		{name: "KMS key with AES256", in: Config{Bucket: "b", SSE: SSES3, SSEKMSKeyID: "k"}, wantErr: "KMS key"},
		{name: "half credentials", in: Config{Bucket: "b", AccessKeyID: "id"}, wantErr: "together"},
		{name: "timeout kept", in: Config{Bucket: "b", RequestTimeout: time.Second}, check: func(t *testing.T, c Config) {
			if c.RequestTimeout != time.Second {
				t.Errorf("RequestTimeout = %v", c.RequestTimeout)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.in.normalized()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestConfigStringHidesSecrets(t *testing.T) {
	c := Config{Bucket: "b", AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI", SessionToken: "FwoGZXIvYXdzEXAMPLETOKEN"}
	for _, s := range []string{c.String(), strings.ReplaceAll(c.String(), " ", "")} {
		if strings.Contains(s, "wJalrXUtnFEMI") || strings.Contains(s, "FwoGZXIvYXdz") {
			t.Fatalf("String() leaks a secret: %s", s)
		}
	}
	if !strings.Contains(c.String(), "AKIDEXAMPLE") {
		t.Errorf("String() = %s, want the (non-secret) access key id", c)
	}
}
