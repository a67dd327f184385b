"""The throughput benchmark: a load generator, its results, the gates built on them."""
