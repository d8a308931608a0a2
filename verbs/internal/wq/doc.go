// Package wq holds the work-queue entries that verbs fills and providers
// read: the posted send request (SendWQE), a transport's own copy of one
// (SendWork), the outcome of an executed request (Outcome), a registered
// region's memory and pin count (Region), and the scatter/gather walk over
// them. It sits below verbs so that verbs/driver can name these types
// (as aliases) without verbs exporting them to applications.
//
// Fields are exported for verbs, which fills them at post time; providers
// see the types through verbs/driver and only read them.
package wq
