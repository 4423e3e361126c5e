package deadline

// InClusterPodReaderFrom exposes InClusterPodReader's environment and
// service account directory to tests.
var InClusterPodReaderFrom = inClusterPodReader
