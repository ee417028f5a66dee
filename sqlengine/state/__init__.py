"""What survives a crash, and how it is tested: operator state and the input log on disk.

``store`` keeps each stateful operator's immutable parquet runs and the per-step
manifests that commit them atomically (plus the atomic-write and fsync helpers
everything durable uses); ``cache`` holds the same runs in driver memory as
Arrow indexed by key hash, for small steps; ``inputlog`` is the durable log that
input is written to before any step consumes it; ``faults`` injects crashes and
storage errors at named points, for the recovery tests; ``lock`` makes a storage
directory single-writer (an exclusive lock, and the epoch that fences commits and sinks).
"""
