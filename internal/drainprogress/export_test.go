package drainprogress

// Unlinked is Set as this package declares it, before package drain, which
// this test binary links, installed its own: the Set of a program without
// drain. Package initialisation runs this package's before drain's.
var Unlinked = Set
