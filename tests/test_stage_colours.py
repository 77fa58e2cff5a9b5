"""Stage colours (capture/stages.csv): every stage its own, and the stages one model shows together told apart
with each kind of colour blindness (the HTML once drew rope, qkv_proj, out_proj, layout and other in five
greys: Qwen's rope could not be told from other)."""

import csv
import itertools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLOURS = {r["stage"]: r["colour"] for r in csv.DictReader((ROOT / "capture" / "stages.csv").open(encoding="utf-8"))}

# Machado, Oliveira & Fernandes (2009), severity 1.0, on linear RGB.
VISION = {
    "normal": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.01182, 0.04294, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.3039)),
}
# The stages real models show together: a serving stack (Qwen3 on SGLang/vLLM), eager attention, T5.
TOGETHER = {
    "serving": ("qkv_proj", "qk_norm", "rope", "out_proj", "layout", "kv_cache", "fused_attention", "other", "tp_comm"),
    "eager": ("qkv_proj", "qk_matmul", "scale", "mask", "softmax", "dropout", "pv_matmul", "out_proj", "layout")
    + ("other", "rope"),
    "t5": ("pre_norm", "qkv_proj", "position_bias", "qk_matmul", "mask", "softmax", "pv_matmul", "out_proj")
    + ("layout", "other"),
}


def _lab(colour: str, vision) -> tuple[float, float, float]:
    """CIELAB (D65) of ``colour`` as seen with ``vision``."""

    def linear(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    rgb = [linear(int(colour[i : i + 2], 16)) for i in (1, 3, 5)]
    r, g, b = (min(1.0, max(0.0, sum(row[k] * rgb[k] for k in range(3)))) for row in vision)
    x, y, z = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.9505,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.089,
    )

    def f(t):
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def test_every_stage_has_its_own_colour():
    assert len(set(COLOURS.values())) == len(COLOURS)
    assert "other" in COLOURS and "rope" in COLOURS


@pytest.mark.parametrize("vision", VISION)
def test_stages_shown_together_stay_apart(vision):
    close = []
    for group, stages in TOGETHER.items():
        for a, b in itertools.combinations(stages, 2):
            lab_a, lab_b = _lab(COLOURS[a], VISION[vision]), _lab(COLOURS[b], VISION[vision])
            delta = sum((p - q) ** 2 for p, q in zip(lab_a, lab_b)) ** 0.5
            if delta < 12:  # ΔE*ab: about 2 is a just-noticeable difference; 12 reads as another colour at a glance
                close.append((group, a, b, round(delta, 1)))
    assert close == []


def test_the_plots_and_the_report_use_the_vocabulary_colours():
    from tracekit.present import plots
    from tracekit.schema import stages

    assert plots.stage_color("rope") == stages.colours()["rope"]
