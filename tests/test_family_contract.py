"""The family adapter's contract (papa/families/contract.py) kept by every registered family: its attention class
provides each hook of `FamilyAdapter` (and a decoder's of `DecoderAdapter`), as a method or a property as declared,
with the declared arguments, and a patched tiny model's layers are instances of the protocols. A new adapter that
misses a hook fails here, not in a run."""

import inspect

import pytest
import torch
from tiny_decoders import DECODER_NAMES, tiny_family_model
from tiny_encoders import H, L, T

import papa
from papa.families import FAMILIES, PapaAttention, attention_modules
from papa.families.bert import PapaBertLikeAttention
from papa.families.contract import DecoderAdapter, FamilyAdapter, hooks

POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def positional(function):
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind in POSITIONAL]


def contract_problems(cls, protocol):
    """What `cls` lacks of `protocol`'s hooks, one line each: missing, a method where a property is declared or the
    other way round, another number of positional arguments (papa_call takes the stock forward's, whatever they are)."""
    problems = []
    for name, kind in hooks(protocol).items():
        try:
            provided = inspect.getattr_static(cls, name)
        except AttributeError:
            problems.append(f"{name}: missing")
            continue
        if kind == "method" and not inspect.isfunction(provided):
            problems.append(f"{name}: not a method")
        elif kind == "property" and inspect.isfunction(provided):
            problems.append(f"{name}: a method, where a property (or a plain attribute) is declared")
        elif kind == "method" and name != "papa_call":
            declared = inspect.getattr_static(protocol, name)
            if len(positional(provided)) != len(positional(declared)):
                problems.append(f"{name}{inspect.signature(provided)}: declared {inspect.signature(declared)}")
    return problems


def test_the_protocols_declare_every_hook():
    assert hooks(FamilyAdapter) == {
        "papa_call": "method", "papa_dropout_p": "property", "papa_values": "method", "papa_validity": "method",
        "papa_scores": "method", "papa_dynamic_context": "method", "papa_return": "method", "papa_prune": "method",
        "papa_value_rows": "method", "papa_band": "method"}
    assert hooks(DecoderAdapter) == dict(hooks(FamilyAdapter), papa_window="property", papa_unit_values="method",
                                         papa_value_units="property", papa_rotated="method",
                                         papa_cached_dynamic="method")
    for protocol in (FamilyAdapter, DecoderAdapter):
        for name in hooks(protocol):
            hook = inspect.getattr_static(protocol, name)
            assert (hook.fget if isinstance(hook, property) else hook).__doc__, f"{protocol.__name__}.{name}"


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_every_family_provides_every_hook(model_type):
    family = FAMILIES[model_type]
    cls = family.patched_class
    assert contract_problems(cls, DecoderAdapter if family.causal else FamilyAdapter) == []
    assert FamilyAdapter not in cls.__mro__  # a hook inherited from the protocol would be its stub, doing nothing


def test_a_missing_or_misshapen_hook_is_found():
    assert contract_problems(PapaAttention, FamilyAdapter) == [  # the base provides papa_band's default alone
        f"{name}: missing" for name in hooks(FamilyAdapter) if name != "papa_band"]

    class Broken(PapaBertLikeAttention):
        papa_scores = None

        def papa_dropout_p(self):
            return 0.0

        def papa_dynamic_context(self, call):
            return call

    assert contract_problems(Broken, FamilyAdapter) == [
        "papa_dropout_p: a method, where a property (or a plain attribute) is declared", "papa_scores: not a method",
        "papa_dynamic_context(self, call): declared (self, call, values)"]
    assert contract_problems(PapaBertLikeAttention, DecoderAdapter) == [
        f"{name}: missing" for name in ("papa_window", "papa_unit_values", "papa_value_units", "papa_rotated",
                                        "papa_cached_dynamic")]


@pytest.mark.parametrize("name", ["bert", "deberta", "modernbert", "llama", "gpt2"])
def test_patched_layers_are_instances_of_the_protocols(name):
    """isinstance (runtime_checkable) on a patched model's layers, whose properties then read their patched state."""
    model = tiny_family_model(name)
    papa.patch_model(model, torch.rand(L, H, T, T, generator=torch.Generator().manual_seed(1)),
                     static_heads={0: [1, 3]})
    for layer in attention_modules(model):
        assert isinstance(layer, FamilyAdapter)
        assert isinstance(layer, DecoderAdapter) == (name in DECODER_NAMES)
