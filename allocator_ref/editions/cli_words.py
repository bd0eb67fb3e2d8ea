"""The command lines in the reader's language: ``--help`` and argparse's own lines (``usage:``, its error
lines), looked up in the tools' catalogue when they are shown.

The help sentences stay literal English where each argument is declared (``help="..."``), as before;
``python -m allocator_ref.editions update`` reads every ``help=`` and ``description=`` literal of the
command-line files (tool_catalogues.CLI_FILES) into ``doctor.po``, and this parser says each one through
that catalogue at the moment ``--help`` prints (argparse's ``HelpFormatter`` formats ``action.help`` then).

Argparse's own sentences ("usage: ", "the following arguments are required: %s", "%(prog)s: error:
%(message)s\\n", ...) go through ``gettext`` inside argparse.py (``from gettext import gettext as _,
ngettext``), which finds no Chinese catalogue.  While a ``CourseParser`` parses, formats or reports an
error, argparse's ``_`` and ``ngettext`` look up the same catalogue instead (:func:`argparse_speaking`);
its msgids are listed below (``ARGPARSE``) so ``editions update`` puts them there.  Every command line of
ours builds a ``CourseParser`` and parses under :func:`parse_in_language`.
"""
from __future__ import annotations

import argparse
import re
import sys
from contextlib import contextmanager

from .language import language, speaking
from .messages import say, translator

tr = translator("doctor")
argparse_words = translator("doctor", later=True)     # gettext's N_: marks argparse's msgids for the catalogue

# Argparse's msgids a learner can meet (Python 3.11's argparse.py; 3.12 and 3.13 keep them): its headings,
# its error line and the errors parse_args raises.  A msgid argparse no longer says is simply never asked.
ARGPARSE = (
    argparse_words("usage: "),
    argparse_words("%(prog)s: error: %(message)s\n"),
    argparse_words("argument %(argument_name)s: %(message)s"),
    argparse_words("the following arguments are required: %s"),
    argparse_words("unrecognized arguments: %s"),
    argparse_words("invalid choice: %(value)r (choose from %(choices)s)"),
    argparse_words("invalid %(type)s value: %(value)r"),
    argparse_words("expected one argument"),
    argparse_words("expected at most one argument"),
    argparse_words("expected at least one argument"),
    argparse_words("expected %s argument"),
    argparse_words("expected %s arguments"),
    argparse_words("ambiguous option: %(option)s could match %(matches)s"),
    argparse_words("not allowed with argument %s"),
    argparse_words("one of the arguments %s is required"),
    argparse_words("ignored explicit argument %r"),
    argparse_words("unknown parser %(parser_name)r (choices: %(choices)s)"),
    argparse_words("can't open '%(filename)s': %(error)s"),
)
# argparse fills its sentences with ``%``: a translation must keep each placeholder, or ``%`` fails (or
# shows another value) in the middle of an error.
PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[a-zA-Z%]")


def argparse_gettext(message: str) -> str:
    """argparse's ``_``: its English ``message``, or the catalogue's Chinese when it keeps every placeholder."""
    if not isinstance(message, str):          # argparse also passes None (a subparsers' missing description)
        return message
    text = say("doctor", message)
    return text if sorted(PLACEHOLDER.findall(text)) == sorted(PLACEHOLDER.findall(message)) else message


def argparse_ngettext(singular: str, plural: str, n: int) -> str:
    """argparse's ``ngettext``: the English form for ``n``, then its Chinese (Chinese has one form)."""
    return argparse_gettext(singular if n == 1 else plural)


@contextmanager
def argparse_speaking():
    """Argparse's own sentences in the current language for one block (nested blocks restore in turn)."""
    saved = argparse._, argparse.ngettext
    argparse._, argparse.ngettext = argparse_gettext, argparse_ngettext
    try:
        yield
    finally:
        argparse._, argparse.ngettext = saved


class CourseParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` that reads in the reader's language: its help and its own error lines
    (subparsers inherit it)."""

    def parse_args(self, args=None, namespace=None):
        with argparse_speaking():             # "unrecognized arguments" is said here, after parse_known_args
            return super().parse_args(args, namespace)

    def parse_known_args(self, args=None, namespace=None):
        with argparse_speaking():             # a subparser parses here, called from its parent's parse
            return super().parse_known_args(args, namespace)

    def error(self, message):
        with argparse_speaking():             # "%(prog)s: error: ..." and the usage line before it
            super().error(message)

    def format_help(self) -> str:
        with argparse_speaking():
            return self._translated(super().format_help)

    def format_usage(self) -> str:
        with argparse_speaking():
            return self._translated(super().format_usage)

    def _translated(self, format_text) -> str:
        """Swap each help sentence for its catalogue entry while formatting, then put the English back
        (the parser is reused: a second --help in another language must find the English to look up)."""
        shown = list(self._actions)
        for action in self._actions:        # a subcommand's one-line help lives on a pseudo-action
            shown += getattr(action, "_choices_actions", [])
        saved = [(a, a.help) for a in shown]
        saved_titles = [(g, g.title) for g in self._action_groups]
        saved_description = self.description
        try:
            for action, text in saved:
                if isinstance(text, str) and text != argparse.SUPPRESS:
                    action.help = _help_words(text)
            for group, title in saved_titles:
                if title:
                    group.title = _help_words(title)
            if self.description:
                self.description = say("doctor", self.description)
            return format_text()
        finally:
            for action, text in saved:
                action.help = text
            for group, title in saved_titles:
                group.title = title
            self.description = saved_description


def _help_words(text: str) -> str:
    """One help sentence or group title; argparse's own ones are literal here so the catalogue has them."""
    own = {"show this help message and exit": tr("show this help message and exit"),
           "positional arguments": tr("positional arguments"), "options": tr("options")}
    if text in own:
        return own[text]
    # ``%(default)s`` and friends are argparse's fields, filled after this lookup: say() leaves them alone
    return say("doctor", text)


def language_asked(argv=None) -> str | None:
    """``--lang``'s value when the command line has one, read before the real parse: ``-h`` prints the
    moment argparse meets it, so ``replay -h --lang zh`` must know the language first."""
    args = sys.argv[1:] if argv is None else list(argv)
    for i, word in enumerate(args):
        if word == "--":
            break
        if word == "--lang" and i + 1 < len(args):
            return args[i + 1]
        if word.startswith("--lang="):
            return word.split("=", 1)[1]
    return None


def help_language(argv=None) -> str:
    """The language ``--help`` speaks: ``--lang``, else what the tools decide (English if that fails:
    the settings error itself is reported by the command, in one line)."""
    from .language import normalise
    asked = language_asked(argv)
    try:
        return normalise(asked) or language() if asked else language()
    except ValueError:            # SettingsError is a ValueError; a bad --lang is argparse's error to say
        return "en"


LANG_HELP = ("the human-readable lines' language (default: ALLOCATOR_REF_LANG, a Chinese edition folder, "
             "the course-settings.toml language, the locale, else English); --json keys stay English")


def add_language_option(parser: argparse.ArgumentParser, default=None) -> None:
    """``--lang en|zh``, as every ``python -m allocator_ref`` command has it (same sentence, same choices).
    A subcommand's copy passes ``default=argparse.SUPPRESS``, so ``--lang`` may stand before or after it."""
    from .language import LANGUAGES
    parser.add_argument("--lang", choices=LANGUAGES, default=default, help=LANG_HELP)


def parse_in_language(parser: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with ``--help`` and argparse's error lines in the reader's language
    (``--lang``, ``ALLOCATOR_REF_LANG``, the folder, the locale: :func:`help_language`)."""
    with speaking(help_language(argv)):       # -h prints while parsing, before the command decides
        return parser.parse_args(argv)
