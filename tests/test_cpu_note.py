"""The features stage's note on CPU kernels, on machines where ltrr's AVX2 pins do not apply
(an Apple Silicon Mac, an x86-64 machine whose AVX2 ltrr cannot read): said, not silent.
Runs on any machine (the pin tests themselves are in test_cpu_kernels.py)."""

from __future__ import annotations

import pytest

import ltrr._cpu as cpu


@pytest.mark.parametrize("system, machine, flags", [("Darwin", "arm64", set()), ("Windows", "AMD64", set()),
                                                    ("Linux", "x86_64", {"sse4_2"})])
def test_a_machine_without_the_pins_is_told_its_numbers_can_differ(monkeypatch, system, machine, flags):
    monkeypatch.delenv("LTRR_CPU_KERNELS", raising=False)
    monkeypatch.setattr(cpu.platform, "system", lambda: system)
    monkeypatch.setattr(cpu.platform, "machine", lambda: machine)
    monkeypatch.setattr(cpu, "_cpuinfo", lambda field: " ".join(sorted(flags)) if flags else None)
    note = cpu.unpinned_note()
    assert note is not None and f"not to this {system} {machine} machine" in note
    assert "corpus-embedding matrix made under the pins is not used" in note
    assert cpu.pin_cpu_kernels() == {}  # and nothing is pinned there
    monkeypatch.setenv("LTRR_CPU_KERNELS", "native")  # asked for the libraries' own kernels: nothing to say
    assert cpu.unpinned_note() is None


def test_a_pinned_machine_has_no_note(monkeypatch):
    monkeypatch.delenv("LTRR_CPU_KERNELS", raising=False)
    monkeypatch.setattr(cpu.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(cpu, "_cpuinfo", lambda field: "sse4_2 avx2 fma")
    monkeypatch.setattr(cpu, "_LOADED_FIRST", set())
    assert cpu.unpinned_note() is None
