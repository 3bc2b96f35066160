"""Text from documents, file names and models, made safe to show on a terminal.

A document can hold escape sequences (ESC, an 8-bit CSI, OSC) that clear the screen, retitle
the window or hide text when printed raw; a file name can hold a newline that splits a
line-per-source listing. What Archivist prints in text goes through these functions, which
show each such character as a visible escape (`\\x1b`) instead.
"""

import re
import unicodedata

# C0 controls but tab and newline, DEL, and the C1 controls (U+0080–U+009F), which some
# terminals read as the start of an escape sequence too.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# In a name, tab and newline as well: one name stays on one line.
_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_C1 = re.compile(r"[\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def printable(text: str) -> str:
    """Show the control characters of `text` as escapes, keeping its lines and tabs."""
    return _CONTROL.sub(_escape, text.replace("\r\n", "\n"))


def printable_name(name: str) -> str:
    """Show every control character of a name as an escape, newlines included, and its
    invisible format characters (zero-width spaces and joiners, bidirectional overrides,
    which make two names read alike or a name read backwards) as `\\u200b`; in a name not
    in NFC form, its combining marks too, so it does not print like its composed twin
    (`cafe\\u0301.md`, not `café.md`)."""
    name = _NAME_CONTROL.sub(_escape, name)
    if not name.isascii():
        name = "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) == "Cf" else c for c in name)
    if unicodedata.normalize("NFC", name) == name:
        return name
    return "".join(f"\\u{ord(c):04x}" if unicodedata.combining(c) else c for c in name)


def escape_json_controls(document: str) -> str:
    """Escape the DEL and C1 characters `json.dumps(ensure_ascii=False)` leaves raw (the C0
    ones it escapes already); they occur only inside strings, so the JSON stays valid."""
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", document)
