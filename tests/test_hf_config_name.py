"""The name an ``hf:`` config is reported under: the folder of a ``config.json`` (the hub's
layout), else the file's own name (a folder of several configs named after their models was
reported under the folder's name for each of them)."""
from __future__ import annotations

import json

import pytest

from layerscope.frontends.llm_models import hf_config_dict

CASES = [  # (folder, file, the spec relative to tmp_path, expected name)
    ("mistral-7b", "config.json", "mistral-7b/config.json", "mistral-7b"),
    ("mistral-7b", "config.json", "mistral-7b", "mistral-7b"),
    ("configs", "falcon-7b.json", "configs/falcon-7b.json", "falcon-7b"),
    ("configs", "gemma2.2b.json", "configs/gemma2.2b.json", "gemma2.2b"),
]


@pytest.mark.parametrize("folder,file,spec,expected", CASES)
def test_hf_config_name(tmp_path, monkeypatch, folder, file, spec, expected):
    (tmp_path / folder).mkdir()
    (tmp_path / folder / file).write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.chdir(tmp_path)
    name, data = hf_config_dict("hf:" + spec)
    assert (name, data) == (expected, {"model_type": "llama"})
