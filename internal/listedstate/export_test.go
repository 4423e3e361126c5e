package listedstate

// Unlinked is Of as this package declares it, before package httpsource, which
// this test binary links (the Example), installed its own: the Of of a program
// without httpsource. Package initialisation runs this package's before
// httpsource's.
var Unlinked = Of
