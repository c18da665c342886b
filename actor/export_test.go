package actor

// Grace is grace, for the tests of package actor_test.
const Grace = grace
