// Package store serves a directory of files (training shards, any format)
// over verbs, and reads them back: clients read file ranges by RDMA READ from
// buffers the server keeps registered, or have the server WRITE them into
// the client's registered memory, many ranges per round trip.
package store

// FileInfo is one exported file: its name relative to the served directory
// and its size in bytes.
type FileInfo struct {
	Name string
	Size int64
}

// Extent is a byte range of one file: File indexes the server's file list
// (Client.Files), Off and Len are in bytes.
type Extent struct {
	File int
	Off  int64
	Len  int
}
