package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"

	"github.com/ferry-fs/ferry/bench/internal/floor"
)

func main() { floor.Main("getfloor", run) }

func run(args []string) error {
	if len(args) != 5 && len(args) != 6 {
		return fmt.Errorf("usage: getfloor ENDPOINT BUCKET KEY C PART [CACHEFILE]")
	}
	ep, bucket, key := args[0], args[1], args[2]
	nums, err := floor.Positive(args[3:5])
	if err != nil {
		return err
	}
	conc, part := int(nums[0]), nums[1]
	cl := floor.Client(ep, conc)
	ctx := context.Background()
	head, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return err
	}
	size := aws.ToInt64(head.ContentLength)
	bufs := sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}
	var sink io.Writer = io.Discard
	var cf *cacheFile
	if len(args) == 6 {
		if cf, err = newCacheFile(args[5], size, part); err != nil {
			return err
		}
		defer cf.close()
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	var rg errgroup.Group // the cache mode's reader
	if cf != nil {
		rg.Go(cf.readAll)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	for off := int64(0); off < size; off += part {
		end := min(off+part, size) - 1
		g.Go(func() error {
			out, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key, Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, end))})
			if err != nil {
				return err
			}
			defer out.Body.Close()
			bp := bufs.Get().(*[]byte)
			defer bufs.Put(bp)
			w := sink
			if cf != nil {
				w = cf.writer(off)
			}
			n, err := io.CopyBuffer(w, struct{ io.Reader }{out.Body}, *bp)
			if err == nil && n != end-off+1 {
				err = fmt.Errorf("range %d-%d: %d bytes", off, end, n)
			}
			if err == nil && cf != nil {
				cf.landed(off)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := rg.Wait(); err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	cpu := (cpuTime() - cpu0).Seconds()
	fmt.Printf("%.1f MiB/s %.3f CPU s %.3f CPU s/GiB\n", float64(size)/secs/(1<<20), cpu, cpu/(float64(size)/(1<<30)))
	return nil
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
