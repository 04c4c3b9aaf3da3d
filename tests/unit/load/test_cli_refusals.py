"""`inferbus load` refuses bad numbers and options it would ignore with one error line,
before it reaches for a broker (none listens at the address given here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app

NOWHERE = "127.0.0.1:1"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    rows = "".join(f"2023-11-16 18:00:{s:02d}.5,800,1\n" for s in range(60))
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "nan"], "--rate must be a finite number > 0 requests/s, not nan"),
        (["--rate", "inf"], "--rate must be a finite number > 0 requests/s, not inf"),
        (["--rate", "5", "--rate-scale", "nan"], "--rate-scale must be a finite number > 0"),
        (["--scenario", "burst", "--rate-scale", "inf"], "--rate-scale must be a finite"),
        (["--scenario", "burst", "--rate-scale", "1e6"], "a load run sends at most 1,000,000"),
        (["--rate", "1e9", "--duration", "1"], "a load run sends at most 1,000,000"),
        (["--rate", "5", "--duration", "inf"], "--duration must be a finite number > 0"),
        (["--trace", "TRACE", "--token-scale", "nan"], "--token-scale must be a finite"),
        (["--trace", "TRACE", "--trace-start", "nan"], "--trace-start must be a finite"),
        (["--rate", "5", "--seed", "-1"], "--seed must be >= 0, not -1"),
        (["--rate", "5", "--grace", "-30"], "--grace must be a finite number >= 0"),
        (["--rate", "5", "--grace", "nan"], "--grace must be a finite number >= 0"),
        (["--rate", "2", "--tokens", "600"], "--tokens 600 is longer than demo-encoder takes: "
                                             "at most 512 tokens"),
        (["--rate", "2", "--tokens", "0"], "--tokens must be >= 1"),
        (["--rate", "2", "--model", "demo-mlp", "--tokens", "8"], "demo-mlp has none"),
        (["--trace", "TRACE", "--tokens", "8"], "--tokens applies to --rate only, not to "
                                                "--trace"),
        (["--rate", "5", "--trace-start", "3"], "--trace-start applies to --trace only"),
        (["--rate", "5", "--token-scale", "0.5"], "--token-scale applies to --trace only"),
        (["--scenario", "burst", "--tiers", "batch"], "--tiers applies to --rate and --trace"),
        (["--scenario", "burst", "--tokens", "8"], "--tokens applies to --rate only"),
        (["--rate", "5", "--reply-to", "inferbus.ingest.interactive"], "is not a topic results"),
        (["--rate", "5", "--tiers", "batch,batch"], "--tiers names batch more than once"),
        (["--rate", "5", "--tiers", "gold"], "--tiers names 'gold', not a tier"),
        (["--rate", "5", "--tiers", ""], "--tiers names no tier"),
    ],
    ids=[
        "nan-rate", "inf-rate", "nan-rate-scale", "inf-scenario-scale", "scenario-over-cap",
        "rate-over-cap", "inf-duration", "nan-token-scale", "nan-trace-start", "negative-seed",
        "negative-grace", "nan-grace", "tokens-over-model-max", "zero-tokens",
        "tokens-without-sequence", "tokens-with-trace", "trace-start-with-rate",
        "token-scale-with-rate", "tiers-with-scenario", "tokens-with-scenario",
        "reply-to-an-ingest-topic", "tier-twice", "no-such-tier", "no-tier",
    ],
)  # fmt: skip
def test_refused_with_one_error_line(
    args: list[str], message: str, demo_models: Path, trace: Path, tmp_path: Path
) -> None:
    argv = [
        "load", *(str(trace) if a == "TRACE" else a for a in args), "--models", str(demo_models),
        "--bootstrap", NOWHERE, "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("error: ") and message in " ".join(lines), result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # refused before anything was written
