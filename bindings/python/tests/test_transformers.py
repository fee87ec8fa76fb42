"""transformers' from_pretrained through cacheless.patch_safetensors() (pinned transformers, installed
by scripts/test): a 2-layer Llama built from a config (random weights, no hub) saved in several
shards loads to the same state_dict plainly and through the patch, and the cold load through the
patch leaves no shard in the page cache. The patch restores every name it replaced (nested, re-entered,
on an exception, in modules imported meanwhile) and refuses loudly, patching nothing, when a binding
point it knows for this transformers version is gone or holds something else."""

import sys
import types

import pytest

from conftest import require_direct, require_module, run_python

torch = require_module("torch", "installed by scripts/test")
transformers = require_module("transformers", "installed by scripts/test")

import safetensors  # noqa: E402
import safetensors.numpy  # noqa: E402
import safetensors.torch  # noqa: E402
import transformers.integrations.accelerate  # noqa: E402
import transformers.modeling_layers  # noqa: E402
import transformers.modeling_utils  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import cacheless  # noqa: E402
from cacheless import _patch  # noqa: E402

ORIGINAL = {
    "safetensors.safe_open": safetensors.safe_open,
    "safetensors.torch.load_file": safetensors.torch.load_file,
    "safetensors.numpy.load_file": safetensors.numpy.load_file,
}
# Where transformers 5 binds safetensors.safe_open on the from_pretrained path.
BINDINGS = [transformers.modeling_utils, transformers.modeling_layers, transformers.integrations.accelerate]


def assert_restored():
    assert safetensors.safe_open is ORIGINAL["safetensors.safe_open"]
    assert safetensors.torch.load_file is ORIGINAL["safetensors.torch.load_file"]
    assert safetensors.numpy.load_file is ORIGINAL["safetensors.numpy.load_file"]
    assert safetensors.torch.safe_open is ORIGINAL["safetensors.safe_open"]
    for m in BINDINGS:
        assert m.safe_open is ORIGINAL["safetensors.safe_open"], m.__name__


def assert_patched():
    assert safetensors.safe_open is not ORIGINAL["safetensors.safe_open"]
    assert issubclass(safetensors.safe_open, cacheless.safetensors.safe_open)
    for m in BINDINGS:
        assert m.safe_open is safetensors.safe_open, m.__name__
    assert safetensors.torch.load_file is not ORIGINAL["safetensors.torch.load_file"]


@pytest.fixture
def llama(disk):
    """A 2-layer Llama (about 70 MB of float32) from a config, saved in 20 MB shards: (model, folder, shards)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    folder = disk / "llama"
    model.save_pretrained(folder, max_shard_size="20MB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) >= 3, shards
    assert (folder / "model.safetensors.index.json").exists()
    return model, folder, shards


def assert_same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype, k
        assert sa[k].shape == sb[k].shape, k
        assert torch.equal(sa[k], sb[k]), k


def test_from_pretrained_through_cacheless_is_identical_and_leaves_nothing_cached(llama):
    model, folder, shards = llama
    require_direct(folder)
    for s in shards:
        assert cacheless.evict(s)["after"]["cached_pages"] == 0, s

    with cacheless.patch_safetensors() as p:
        assert_patched()
        assert {f"{m.__name__}.safe_open" for m in BINDINGS} <= set(p.patched)
        through = LlamaForCausalLM.from_pretrained(folder)
    assert_restored()
    # Every shard was opened through cacheless (a patch that replaced nothing would count none).
    assert p.calls.get("safetensors.safe_open") == len(shards), p.calls
    for s in shards:
        r = cacheless.residency(s)
        assert r["cached_pages"] == 0, f"the cold load through cacheless left {s.name} cached: {r}"

    plain = LlamaForCausalLM.from_pretrained(folder)
    # The measurement means something: transformers' own (mmap) load leaves every shard partly cached.
    for s in shards:
        assert cacheless.residency(s)["cached_pages"] > 0, s
    assert_same_state(plain, through)
    assert_same_state(model, through)


def test_load_file_through_cacheless(llama):
    _model, _folder, shards = llama
    require_direct(shards[0])
    assert cacheless.evict(shards[-1])["after"]["cached_pages"] == 0
    with cacheless.patch_safetensors() as p:
        got = safetensors.torch.load_file(shards[-1])
        arrays = safetensors.numpy.load_file(shards[-1])
    assert p.calls == {"safetensors.torch.load_file": 1, "safetensors.numpy.load_file": 1}
    assert cacheless.residency(shards[-1])["cached_pages"] == 0
    plain = ORIGINAL["safetensors.torch.load_file"](shards[-1])
    assert list(got) == list(plain)
    for k in plain:
        assert torch.equal(got[k], plain[k]), k
        assert (arrays[k] == plain[k].numpy()).all(), k


def test_undo_nesting_reentry_and_exceptions():
    assert_restored()
    p = cacheless.patch_safetensors()  # a start-up call: active until undo()
    assert p.active
    assert_patched()
    with cacheless.patch_safetensors() as inner:
        assert_patched()
    assert not inner.active
    assert_patched()  # the outer patch still holds
    p.undo()
    assert not p.active
    assert_restored()
    p.undo()  # twice is harmless
    assert_restored()

    with pytest.raises(KeyError):
        with cacheless.patch_safetensors():
            assert_patched()
            raise KeyError("inside")
    assert_restored()

    q = cacheless.patch_safetensors()
    with q:
        with q:  # re-entered: undone when the outermost with ends
            assert_patched()
        assert_patched()
    assert not q.active
    assert_restored()
    with q:  # and usable again
        assert q.active
        assert_patched()
    assert_restored()
    assert q.patched == []


def test_modules_imported_while_patched_are_restored():
    name = "transformers._cacheless_probe"
    try:
        with cacheless.patch_safetensors():
            probe = types.ModuleType(name)
            sys.modules[name] = probe
            exec("from safetensors import safe_open\nfrom safetensors.torch import load_file as safe_load_file", probe.__dict__)
            assert issubclass(probe.safe_open, cacheless.safetensors.safe_open)
        assert probe.safe_open is ORIGINAL["safetensors.safe_open"]
        assert probe.safe_load_file is ORIGINAL["safetensors.torch.load_file"]
    finally:
        sys.modules.pop(name, None)
    assert_restored()


def test_frameworks_cacheless_does_not_read_go_to_the_package(llama):
    _model, _folder, shards = llama
    with cacheless.patch_safetensors() as p:
        with safetensors.safe_open(shards[-1], framework="pt") as f:
            assert isinstance(f, cacheless.safetensors.safe_open)
        with pytest.raises(safetensors.SafetensorError) as e:
            safetensors.safe_open(shards[-1], framework="no-such-framework")
        assert type(e.value) is safetensors.SafetensorError  # the package's own refusal, not cacheless's
    assert p.calls == {"safetensors.safe_open": 1}


def test_missing_binding_point_fails_loudly_and_patches_nothing(monkeypatch):
    monkeypatch.delattr(transformers.modeling_layers, "safe_open")
    with pytest.raises(RuntimeError, match=rf"transformers {transformers.__version__}: transformers\.modeling_layers\.safe_open does not exist"):
        cacheless.patch_safetensors()
    assert safetensors.safe_open is ORIGINAL["safetensors.safe_open"]
    assert transformers.modeling_utils.safe_open is ORIGINAL["safetensors.safe_open"]
    assert _patch._installed is None


def test_binding_point_holding_something_else_fails_loudly(monkeypatch):
    def elsewhere(*a, **k):
        raise AssertionError("not to be called")

    monkeypatch.setattr(transformers.modeling_utils, "safe_open", elsewhere)
    with pytest.raises(RuntimeError, match=r"transformers\.modeling_utils\.safe_open is .*not safetensors\.safe_open"):
        cacheless.patch_safetensors()
    assert transformers.modeling_utils.safe_open is elsewhere
    assert safetensors.safe_open is ORIGINAL["safetensors.safe_open"]


def test_a_version_whose_names_moved_fails_loudly(monkeypatch):
    moved = (((5, 0), (("transformers.modeling_utils", "load_weights_from", "safetensors.safe_open"),)),)
    monkeypatch.setattr(_patch, "TRANSFORMERS_BINDINGS", moved)
    with pytest.raises(RuntimeError, match=r"transformers\.modeling_utils\.load_weights_from does not exist"):
        with cacheless.patch_safetensors():
            pass
    assert_restored()


def test_without_transformers_only_the_safetensors_package_is_patched():
    code = """
import sys
sys.modules["transformers"] = None  # as if not installed
import safetensors, cacheless
with cacheless.patch_safetensors() as p:
    names = p.patched
    assert "safetensors.safe_open" in names and not any(n.startswith("transformers") for n in names), names
    assert issubclass(safetensors.safe_open, cacheless.safetensors.safe_open)
try:
    cacheless.patch_safetensors(transformers=True)
except RuntimeError as e:
    print("refused:", e)
"""
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert "refused: cacheless.patch_safetensors(transformers=True): transformers is not installed" in r.stdout
