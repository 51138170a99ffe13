"""What the tests share: where the checkout, the tests and the recorded fixtures lie, and the
helpers several tests use (synthetic run directories, recorded traces, a Slurm or docker engine)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
