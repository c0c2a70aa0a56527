// Package gcs is the Google Cloud Storage driver of objstore, built on
// cloud.google.com/go/storage (JSON API over HTTP). It owns the GCS error
// mapping and the parallel composite upload that implements
// objstore.Multipart. It may import only pkg/objstore and the GCS SDK; it is
// the only package of ferry that imports the GCS SDK.
//
// Against fake-gcs-server (Config.Emulator) it checks on the client what the
// emulator ignores: preconditions on reads, copies, deletes and composes, and
// delimiter listing. Real GCS enforces all of them on the server.
package gcs
