package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"

	"github.com/ferry-fs/ferry/bench/internal/floor"
)

func main() { floor.Main("putfloor", run) }

func run(args []string) error {
	if len(args) != 6 {
		return fmt.Errorf("usage: putfloor ENDPOINT BUCKET PREFIX N C SIZE")
	}
	ep, bucket, prefix := args[0], args[1], args[2]
	nums, err := floor.Positive(args[3:])
	if err != nil {
		return err
	}
	n, conc, size := int(nums[0]), int(nums[1]), nums[2]
	cl := floor.Client(ep, conc)
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
