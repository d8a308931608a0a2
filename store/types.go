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
