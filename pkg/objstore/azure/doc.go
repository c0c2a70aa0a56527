// Package azure is the Azure Blob Storage driver of objstore, built on
// azblob (block blobs). It owns the Azure credential chain, the Azure error
// mapping, the reversible encoding of metadata keys into C# identifiers and
// the block-list multipart upload (objstore.Multipart). It may import only
// pkg/objstore, azblob, azcore and azidentity; it is the only package of
// ferry that imports the Azure SDK.
package azure
