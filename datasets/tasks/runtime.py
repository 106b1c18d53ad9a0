"""Access to the NDVM runtime from the tasks (imported lazily: the data layer works without it)."""

from __future__ import annotations

from .errors import CandidateError, RuntimeUnavailableError


def require_ndvm():
    """The ``ndvm`` module, or a RuntimeUnavailableError saying what is missing."""
    try:
        import ndvm
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise RuntimeUnavailableError(
            f"the NDVM runtime cannot be imported ({exc}); build it with `make build`"
        ) from exc
    missing = [name for name in ("compile", "calibrate") if not hasattr(ndvm, name)]
    if missing:
        raise RuntimeUnavailableError(
            f"the installed ndvm package lacks {missing}; build the runtime with `make build`"
        )
    return ndvm


def ndvm_available() -> bool:
    try:
        require_ndvm()
        return True
    except RuntimeUnavailableError:
        return False


# ---- reading candidates ----------------------------------------------------------------------
# The tasks look at a candidate's top-level forms (which names it defines, which symbols it
# mentions, whether it ends with an expression) before compiling it; they read it with the
# runtime's own reader (ndvm.read), so they see the program exactly as the compiler will.


def read_candidate(source: str) -> list:
    """The candidate's top-level forms as ndvm.read data; CandidateError if it cannot be read."""
    ndvm = require_ndvm()
    try:
        return ndvm.read(source)
    except ndvm.ParseError as exc:
        raise CandidateError(f"the candidate cannot be read: {exc}") from None


def top_level_forms(source: str) -> list[str]:
    """Each top-level form of ``source``, printed back as text (comments dropped), in order."""
    from ndvm.language import to_str

    return [to_str(form) for form in read_candidate(source)]


def _head(form) -> str | None:
    return str(form[0]) if isinstance(form, list) and form and isinstance(form[0], str) else None


def defined_names(source: str) -> dict[str, str]:
    """Top-level ``define``/``param`` names -> "function" | "value" | "param"."""
    names: dict[str, str] = {}
    for form in read_candidate(source):
        head = _head(form)
        if head not in ("define", "param") or len(form) < 2:
            continue
        target = form[1]
        if head == "param" and isinstance(target, str):
            names[str(target)] = "param"
        elif isinstance(target, str):
            names[str(target)] = "value"
        else:  # (define (f args...) ...) or (define (f . rest) ...)
            fn = target[0] if isinstance(target, list) and target else getattr(target, "items", (None,))[0]
            if isinstance(fn, str):
                names[str(fn)] = "function"
    return names


def symbols(source: str) -> set[str]:
    """Every symbol the candidate mentions (bound or free, operators included)."""
    out: set[str] = set()
    work = list(read_candidate(source))
    while work:  # an explicit stack: no recursion per level of nesting
        node = work.pop()
        if isinstance(node, str):  # ndvm.Symbol
            out.add(str(node))
        elif isinstance(node, list):
            work.extend(node)
        elif hasattr(node, "tail"):  # ndvm.language.Dotted
            work.extend(node.items)
            work.append(node.tail)
    return out


def last_form_is_expression(source: str) -> bool:
    forms = read_candidate(source)
    return bool(forms) and _head(forms[-1]) not in ("define", "param")
