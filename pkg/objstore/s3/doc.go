// Package s3 is ferry's Amazon S3 driver (and S3-compatible stores such as
// MinIO), built on aws-sdk-go-v2. [New] returns a [*Store] that implements
// objstore.Store and objstore.Multipart for one bucket; [ConfigFromEnv]
// reads the Nextflow/Fusion and AWS environment variables.
//
// It is the only package that imports the AWS SDK. It may import
// pkg/objstore and the SDK, nothing else of ferry. Retries are left to
// objstore.WithRetry: the SDK makes one attempt per call.
package s3
