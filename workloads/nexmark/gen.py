"""The Nexmark event generator, now ``connectors.nexmark_gen`` (part of the installed package, used by the
``nexmark`` source connector); re-exported here for the tests and benchmarks.

CLI: ``python -m workloads.nexmark.gen --events 100000 --seed 1 --out DIR [--format parquet|csv]``
"""
from connectors.nexmark_gen import *  # noqa: F401,F403
from connectors.nexmark_gen import (_POOL_LEN, _Rand, _extras, _main, _mix, _price,  # noqa: F401
                                    _reverse_bits32)

if __name__ == "__main__":
    _main()
