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
