"""Pipeline and RemotePipeline against the protocol of the methods they share (sqlengine.api.protocol): the
same method names, parameters (names, kinds, defaults, annotations) and return annotations."""
import inspect

import pandas as pd
import pytest

from sqlengine import InputError, Pipeline
from sqlengine.api.client import RemotePipeline
from sqlengine.api.protocol import SHARED_METHODS, PipelineLike

# what only the embedded Pipeline has (see sqlengine/api/protocol.py)
EMBEDDED_ONLY = {"from_sql", "output_parquet", "set_clock", "advance_clock",
                 "input_arrow",    # (the server's ingress takes JSON and CSV, not Arrow IPC yet)
                 "transaction"}    # (the server's ingress takes one table per request)


def public(cls):
    return {m for m in dir(cls) if not m.startswith("_")}


def test_the_protocol_lists_every_shared_method():
    assert set(SHARED_METHODS) | {"runtime_config"} == public(PipelineLike) - {"name"}
    assert public(Pipeline) - EMBEDDED_ONLY == set(SHARED_METHODS), "Pipeline has a method the protocol lacks"
    # runtime_config: an attribute of Pipeline instances, a property of RemotePipeline
    assert public(RemotePipeline) - {"runtime_config"} == set(SHARED_METHODS), \
        "RemotePipeline has a method the protocol lacks"


@pytest.mark.parametrize("cls", [Pipeline, RemotePipeline])
@pytest.mark.parametrize("method", SHARED_METHODS)
def test_signatures_match_the_protocol(cls, method):
    want = inspect.signature(getattr(PipelineLike, method))
    got = inspect.signature(getattr(cls, method))
    assert [(p.name, p.kind, p.default, p.annotation) for p in got.parameters.values()] == \
        [(p.name, p.kind, p.default, p.annotation) for p in want.parameters.values()], \
        f"{cls.__name__}.{method}{got} differs from PipelineLike.{method}{want}"
    assert got.return_annotation == want.return_annotation, f"{cls.__name__}.{method} returns {got.return_annotation}"


def test_remote_pipeline_takes_no_dead_letter_path(tmp_path):
    """``dead_letter`` is in RemotePipeline's signatures to match Pipeline's; the server chooses the path."""
    from sqlengine.api.client import Client
    rp = RemotePipeline(Client("http://127.0.0.1:9"), "p")   # raises before any request
    for call in (lambda: rp.input_json("t", [{"x": 1}], on_error="dead_letter", dead_letter="bad.jsonl"),
                 lambda: rp.input_csv("t", "x\n1\n", on_error="dead_letter", dead_letter="bad.jsonl"),
                 lambda: rp.input_pandas("t", pd.DataFrame({"x": [1]}), on_error="dead_letter",
                                         dead_letter="bad.jsonl")):
        with pytest.raises(InputError, match="leave dead_letter unset"):
            call()
