"""Long runs: the chaos run, the PostgreSQL crash test, a real Spark standalone cluster, benchmark smoke runs."""
