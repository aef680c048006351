"""`scalebench schema`: the JSON Schema of the scenario and experiment files, generated from the
parsers' key tuples and registries, and agreeing with the parsers."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from experiments.config import experiment_from_dict, load_experiment
from experiments.schema import experiment_schema
from scalebench.cli import main
from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.schema import field_types, scenario_schema, section_keys
from sim.strategy import strategy_from_dict

jsonschema = pytest.importorskip("jsonschema")

EXPERIMENTS = ("quickstart", "chainermn_128", "compression", "inception_sync", "model_vs_data_parallel",
               "ps_vs_allreduce", "sync_vs_async", "tcp_vs_infiniband")


def _validator(schema):
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schemas_are_valid_and_typed_exactly_where_the_parsers_have_keys():
    _validator(scenario_schema())
    _validator(experiment_schema())
    keys = section_keys()
    typed = {tuple(k.split(".", 1)) for k in field_types()}
    assert typed == {(section, key) for section, names in keys.items() for key in names}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_shipped_experiment_is_valid(name):
    path = resources.files("experiments").joinpath(f"{name}.yaml")
    from sim.yamlio import load_yaml_text

    doc = load_yaml_text(path.read_text())
    assert list(_validator(experiment_schema()).iter_errors(doc)) == []
    load_experiment(str(path))  # and the parser agrees


ENUMS = ("collective", "precision", "kind", "schedule", "stage_balance", "ps_mode", "ps_placement",
         "staleness_penalty", "codec")


@pytest.mark.parametrize("key", ENUMS)
def test_every_value_the_schema_allows_the_parser_accepts_and_no_other(key):
    allowed = field_types()[f"strategy.{key}"]["enum"]
    for value in allowed:
        strategy_from_dict({key: value})
    with pytest.raises(ConfigError):
        strategy_from_dict({key: "nonsense"})
    validator = _validator(scenario_schema())
    assert not list(validator.iter_errors({"workload": "mlp", "strategy": {key: allowed[0]}}))
    assert list(validator.iter_errors({"workload": "mlp", "strategy": {key: "nonsense"}}))


@pytest.mark.parametrize("doc", [
    {"workload": {"model": "mlp"}, "strategy": {"colective": "ring"}},  # a misspelt key
    {"workload": {"model": "mlp"}, "cluster": {"gpus": 0}},
    {"workload": {"model": "mlp", "batch_size": 2.5}},
    {"workload": {"model": "bert_base", "architecture": {"family": "t5"}}},
    {"cluster": {"gpus": 4}},  # no workload
    {"workload": "mlp", "simulation": {"fidelity": "exact"}},
    {"workload": "mlp", "catalog": {"links": {"x": {"kind": "tcp", "bandwidth_Gbps": 1, "efficiency": 1.5}}}},
])
def test_what_the_schema_refuses_the_parser_refuses(doc):
    assert list(_validator(scenario_schema()).iter_errors(doc))
    with pytest.raises(ConfigError):
        scenario_from_dict(doc)


def test_an_experiment_sweep_is_described():
    doc = {"name": "x", "workload": {"model": "mlp"}, "sweep": {"cluster.gpus": {"geometric": {"start": 1, "stop": 8}},
           "case": [{"label": "a", "strategy.collective": "ring"}], "workload.seq_len": [1, 2]}}
    validator = _validator(experiment_schema())
    assert list(validator.iter_errors(doc)) == []
    experiment_from_dict({**doc, "sweep": {k: v for k, v in doc["sweep"].items() if k != "workload.seq_len"}})
    assert list(validator.iter_errors({**doc, "sweep": {"clutser.gpus": [1]}}))
    assert list(validator.iter_errors({**doc, "backend": "cloud"}))


def test_the_command_prints_and_writes(tmp_path, capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"].startswith("scalebench experiment")
    out = tmp_path / "s.json"
    assert main(["schema", "scenario", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["required"] == ["workload"]


def _properties(schema, path=""):
    """Every (path, property schema) of every object in ``schema``, $defs included."""
    if isinstance(schema, dict):
        for key, value in (schema.get("properties") or {}).items():
            yield f"{path}.{key}", value
            yield from _properties(value, f"{path}.{key}")
        for key, value in schema.items():
            if key != "properties":
                yield from _properties(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _properties(value, f"{path}[{i}]")


@pytest.mark.parametrize("make", [scenario_schema, experiment_schema])
def test_every_field_has_a_description(make):
    """Editors show a key's description as its hover text; none had one. Every property of the
    sections and of the experiment's own keys is described (the conditional name enums inside
    if/else repeat a property to narrow it and carry no text of their own)."""
    schema = make()
    described = [(path, prop) for path, prop in _properties(schema) if "/if" not in path and "/else" not in path
                 and "/then" not in path]
    missing = [path for path, prop in described if not prop.get("description")]
    assert missing == []
    from sim.schema_docs import attribute_docs
    from sim.strategy import Strategy

    bucket = schema["$defs"]["strategy"]["properties"]["bucket_mib"]["description"]
    assert bucket == attribute_docs(Strategy)["bucket_bytes"] + " In MiB, or a size (512K, 25M)."  # the field's docstring


NAMES = [({"workload": "resnet5"}, "a model not in the zoo"),
         ({"workload": {"model": "resnet50"}, "cluster": {"gpu": "v1000"}}, "a GPU not in the catalog"),
         ({"workload": "mlp", "cluster": {"inter_link": "ib_edrr"}}, "a link not in the catalog"),
         ({"workload": "mlp", "heterogeneity": {"mixed_gpus": {"k8o": 2}}}, "a mixed GPU type not in the catalog")]


@pytest.mark.parametrize(("doc", "why"), NAMES)
def test_model_gpu_and_link_names_are_enums(doc, why):
    errors = list(_validator(scenario_schema()).iter_errors(doc))
    assert errors, why
    with pytest.raises(ConfigError):
        scenario_from_dict(doc)


def test_every_name_the_schema_lists_the_loader_accepts():
    from sim.schema import builtin_names

    names = builtin_names()
    validator = _validator(scenario_schema())
    for model in names["model"]:
        if model != "decoder":  # it needs an architecture
            assert not list(validator.iter_errors({"workload": model}))
    for gpu in names["gpu"]:
        doc = {"workload": "mlp", "cluster": {"gpu": gpu}}
        assert not list(validator.iter_errors(doc))
        scenario_from_dict(doc)
    for link in names["link"]:
        assert not list(validator.iter_errors({"workload": "mlp", "cluster": {"inter_link": link}}))


def test_names_of_a_files_own_catalog_and_its_own_table_are_allowed():
    validator = _validator(experiment_schema())
    doc = {"name": "x", "workload": {"model": "my_net", "layers_file": "layers.csv"},
           "cluster": {"gpu": "my_gpu", "inter_link": "wan"},
           "catalog": {"gpus": {"my_gpu": {"base": "v100"}}, "links": {"wan": {"base": "tcp_10gbe"}}},
           "sweep": {"cluster.inter_link": ["wan", "ib_edr"]}}
    assert list(validator.iter_errors(doc)) == []
    no_catalog = {k: v for k, v in doc.items() if k != "catalog"}
    assert {e.validator for e in validator.iter_errors(no_catalog)} >= {"enum"}
    assert list(validator.iter_errors({**no_catalog, "sweep": {"cluster.inter_link": ["wann"]}}))


def test_sizes_are_valid_where_the_loader_takes_them():
    doc = {"workload": "mlp", "strategy": {"bucket_mib": "512K"},
           "catalog": {"links": {"jumbo": {"base": "tcp_10gbe", "mtu_bytes": "9K"}}}}
    assert list(_validator(scenario_schema()).iter_errors(doc)) == []
    scenario_from_dict(doc)
    assert list(_validator(scenario_schema()).iter_errors({**doc, "strategy": {"bucket_mib": "lots"}}))
