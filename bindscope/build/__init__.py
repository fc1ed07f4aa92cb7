"""Making datasets: the shard-by-shard build (parallel, resumable), execution backends, the generator registry,
merging parts."""
