package kv

// SetFaultNoDeadMark makes the server forget to mark superseded entries
// dead (a bug the race check must catch); it returns the undo.
func SetFaultNoDeadMark() func() {
	faultNoDeadMark = true
	return func() { faultNoDeadMark = false }
}
