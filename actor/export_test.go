package actor

// NewFixedWindows returns a table of fixed windows of 2 per second, for
// this package's own tests. keytable, which has the tables, imports this
// package, so these tests cannot import it: tables_test.go, of package
// actor_test, which can, sets it.
var NewFixedWindows func() Table

// Grace is grace, for the tests of package actor_test.
const Grace = grace
