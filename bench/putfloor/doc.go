// Command putfloor PUTs N objects of SIZE bytes from memory with the AWS
// SDK, C at a time, and prints how long that took: the floor a client
// without FUSE, staging or journal reaches against the benchmark's object
// store (bench/targets.sh floor).
//
//	putfloor ENDPOINT BUCKET PREFIX N C SIZE
//
// Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
package main
