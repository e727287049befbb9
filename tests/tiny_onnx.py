"""Tiny real ONNX sentence encoders for tests: graphs built with `onnx`, loaded by onnxruntime.

Each token's vector is a row of a random table, so what an embedder must return for a text can
be computed exactly; the outputs can be put in any order, as exports in the wild put them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from mcp_server.embedding import default_model_files


def export_encoder(
    folder: Path, outputs: list[str], vocab: int = 30522, dim: int = 8, mask: bool = True
) -> np.ndarray:
    """A tiny real ONNX encoder in `folder` (with the shipped tokenizer): each token's vector is a
    row of a random table. `outputs` picks, in order, what the graph returns: "ids" (the input
    echoed), "hidden" (the per-token vectors), "last_hidden_state" (the same, by its usual name),
    "hidden16" (the same in float16), "decoy" (per-token vectors from another table) and
    "pooled" (a plain mean, no mask). Returns the table the per-token vectors come from."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir()
    shutil.copy(default_model_files().tokenizer, folder / "tokenizer.json")
    rng = np.random.default_rng(5)
    table, decoy = (rng.normal(size=(vocab, dim)).astype(np.float32) for _ in range(2))
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["hidden"]),
        helper.make_node("Gather", ["decoy_table", "input_ids"], ["decoy"]),
        helper.make_node("Identity", ["hidden"], ["last_hidden_state"]),
        helper.make_node("Cast", ["hidden"], ["hidden16"], to=TensorProto.FLOAT16),
        helper.make_node("Identity", ["input_ids"], ["ids"]),
        helper.make_node("ReduceMean", ["hidden", "axis"], ["pooled"], keepdims=0),
    ]
    per_token = ["batch", "tokens", dim]
    shapes = {
        "ids": (TensorProto.INT64, ["batch", "tokens"]),
        "hidden": (TensorProto.FLOAT, per_token),
        "last_hidden_state": (TensorProto.FLOAT, per_token),
        "hidden16": (TensorProto.FLOAT16, per_token),
        "decoy": (TensorProto.FLOAT, per_token),
        "pooled": (TensorProto.FLOAT, ["batch", dim]),
    }
    graph = helper.make_graph(
        nodes,
        "tiny-encoder",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "tokens"])
            for name in ("input_ids", "attention_mask")[: 2 if mask else 1]
        ],
        [helper.make_tensor_value_info(name, *shapes[name]) for name in outputs],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(decoy, "decoy_table"),
            numpy_helper.from_array(np.array([1]), "axis"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, folder / "model.onnx")
    return table
