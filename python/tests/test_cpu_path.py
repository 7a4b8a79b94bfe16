"""CIRCLEROPE_ISA through Python: circlerope.cpu_path() reports the path the process runs and
why, the operators run the path it forces, and a value that is no path (or a path this CPU
lacks) makes `import circlerope` raise ValueError naming it. The variable is read once per
process, so each case runs in a fresh interpreter."""
import json
import os
import subprocess
import sys
import textwrap

import circlerope

# Positions, a table and one rotation with fixed inputs; prints the path and a digest of the
# output bits. All vector paths give the same bits; portable (no FMA) gives others.
CHILD = """
    import hashlib, json, torch, circlerope
    torch.manual_seed(7)
    q, k = torch.randn(1, 4, 64, 128), torch.randn(1, 2, 64, 128)
    pos, _ = circlerope.get_rope_index(torch.tensor([[1] * 64]))
    table = circlerope.rotary_table(pos)
    rq, rk = circlerope.apply_rotary(q, k, table)
    digest = hashlib.sha256(rq.numpy().tobytes() + rk.numpy().tobytes()).hexdigest()
    print(json.dumps({"path": list(circlerope.cpu_path()), "digest": digest}))
"""


def run_child(isa):
    env = dict(os.environ)
    env.pop("CIRCLEROPE_ISA", None)
    if isa is not None:
        env["CIRCLEROPE_ISA"] = isa
    return subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD)], capture_output=True, text=True, env=env,
                          timeout=300)


def result(isa):
    child = run_child(isa)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_cpu_path_names_the_path_and_the_reason():
    path = circlerope.cpu_path()
    assert path.name in ("portable", "avx2", "avx512", "avx512bf16")
    assert path.reason.startswith("automatic: " + path.name) or path.reason == "forced by CIRCLEROPE_ISA=" + path.name


def test_the_variable_forces_the_path_of_the_operators():
    automatic, portable = result(None), result("portable")
    assert automatic["path"][1].startswith("automatic: ")
    assert portable["path"] == ["portable", "forced by CIRCLEROPE_ISA=portable"]
    if automatic["path"][0] != "portable":
        # portable rounds without FMA: other bits, so the operators ran what was forced
        assert portable["digest"] != automatic["digest"]
        avx2 = result("avx2")
        assert avx2["path"] == ["avx2", "forced by CIRCLEROPE_ISA=avx2"]
        assert avx2["digest"] == automatic["digest"]  # every vector path gives the same bits


def test_an_unusable_value_is_a_value_error_at_import():
    child = run_child("avx1024")
    assert child.returncode != 0
    last = child.stderr.strip().splitlines()[-1]
    assert last == ("ValueError: CIRCLEROPE_ISA='avx1024' is not a code path "
                    "(expected portable, avx2, avx512, avx512bf16 or automatic)"), child.stderr
