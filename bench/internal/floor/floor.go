package floor

import (
	"fmt"
	"net/http"
	"os"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Client returns an S3 client for endpoint ep that keeps up to conc
// connections open. Credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY.
func Client(ep string, conc int) *s3.Client {
	return s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(ep), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
		HTTPClient:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxIdleConns: conc}},
	})
}

// Positive parses the positive numbers in args.
func Positive(args []string) ([]int64, error) {
	out := make([]int64, len(args))
	for i, a := range args {
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q: want a positive number", a)
		}
		out[i] = v
	}
	return out, nil
}

// Main runs run with the command's arguments and exits 1 with its error
// (named by the command) if it fails.
func Main(name string, run func(args []string) error) {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
