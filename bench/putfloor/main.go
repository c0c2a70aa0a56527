package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "putfloor:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 6 {
		return fmt.Errorf("usage: putfloor ENDPOINT BUCKET PREFIX N C SIZE")
	}
	ep, bucket, prefix := args[0], args[1], args[2]
	var nums [3]int
	for i, a := range args[3:] {
		v, err := strconv.Atoi(a)
		if err != nil || v < 1 {
			return fmt.Errorf("%q: want a positive number", a)
		}
		nums[i] = v
	}
	n, conc, size := nums[0], nums[1], nums[2]
	cl := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(ep), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), ""),
		HTTPClient:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxIdleConns: conc}},
	})
	blob := make([]byte, size)
	rand.Read(blob)
	t0 := time.Now()
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(conc)
	for i := range n {
		g.Go(func() error {
			_, err := cl.PutObject(ctx, &s3.PutObjectInput{
				Bucket: &bucket, Key: aws.String(fmt.Sprintf("%s%05d", prefix, i)), Body: bytes.NewReader(blob),
			})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	fmt.Printf("%d PUTs of %d B, %d in flight: %.3f s\n", n, size, conc, time.Since(t0).Seconds())
	return nil
}
