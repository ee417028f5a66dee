"""What the tests share (no tests here): the oracle, the differential and workload drivers, throwaway servers,
network helpers, the chaos harness, and the child processes the crash tests kill."""
