// Package hook carries verbs' provider-side entry points to verbs/driver,
// so that package verbs exports nothing a provider alone should call.
// Package verbs sets Verbs in an init function to a value whose methods
// take verbs' objects (*verbs.QP, *verbs.PD, ...); verbs/driver asserts it
// once, at its own init, to the interface it declares with the same
// methods. Go's internal rule keeps every other package out.
package hook

// Verbs is verbs' provider side; set once by package verbs before any
// other package's init runs.
var Verbs any

// ExecuteLocal and QPDestroyed are the two hooks on a data path (an
// in-process provider calls them for every request): plain functions,
// which verbs/driver asserts to their func types, so a call costs one
// indirect call rather than an interface dispatch and a wrapper.
var ExecuteLocal, QPDestroyed any
