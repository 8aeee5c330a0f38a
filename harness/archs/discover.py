"""The zoo's discovery: every model type of the installed transformers, covered (a spec from its survey table
entry) or not (why), read from the survey table of that release (harness/tables/zoo_v*.py, written by
`python -m harness.survey --survey`)."""
from __future__ import annotations

from .. import tables
from .base import ArchSpec
from .zoo import _one_line, generic_spec, spec_from_entry


def survey_table():
    """The survey table of the installed transformers, else the newest table there is (whose
    entries are then listed as surveyed on another version)."""
    import transformers

    names = tables.names("zoo")
    if not names:
        return None
    want = tables.name("zoo", transformers.__version__)
    return tables.load(want if want in names else names[-1])


def discover() -> tuple[dict[str, ArchSpec], dict[str, str]]:
    """(covered specs by name, not covered model_type -> one-line reason) of the installed transformers."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    data = survey_table()
    table = data.TABLE if data else {}
    same = data is not None and data.SURVEYED_ON.get("transformers") == transformers.__version__
    note = "" if same or data is None else f"; surveyed on transformers {data.SURVEYED_ON.get('transformers')}"
    covered: dict[str, ArchSpec] = {}
    missing: dict[str, str] = {}
    for mt in CONFIG_MAPPING_NAMES:
        e = table.get(mt)
        if e is not None:
            if e["status"] == "covered" and not same:
                # a tiny config calibrated on another transformers is not vouched for here
                missing[mt] = (f"surveyed on transformers {data.SURVEYED_ON.get('transformers')}, not on "
                               f"{transformers.__version__}: `python -m harness.survey --survey` re-surveys")
            elif e["status"] == "covered":
                covered[mt] = spec_from_entry(mt, e, note)
            else:
                missing[mt] = e["reason"] + note
            continue
        try:
            spec, why = generic_spec(mt)
        except Exception as exc:  # noqa: BLE001
            spec, why = None, f"construction fails: {type(exc).__name__}: {_one_line(exc)}"
        if spec is None:
            missing[mt] = f"{why} (not surveyed)"
        else:
            # a model type the table does not know is not calibrated: listed, not run, until surveyed
            missing[mt] = (f"not surveyed on transformers {transformers.__version__}: the generic rule gives "
                           f"{spec.primary_task}; `python -m harness.survey --survey --only {mt}` adds it")
    return covered, missing
