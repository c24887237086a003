import sys
from pathlib import Path

# op_cases, paged_attention_cases and conformance live in tests/ops and tests/.
_TESTS = Path(__file__).resolve().parents[1]
for folder in (_TESTS, _TESTS / "ops"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
