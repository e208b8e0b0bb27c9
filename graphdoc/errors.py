"""Errors that graphdoc reports to users as one clear line."""

from __future__ import annotations


class GraphDocError(Exception):
    """A problem with the user's input, files or settings.

    The message is a single line that names the problem (file, line, id or setting); the CLI prints it
    on stderr and exits with status 1 instead of showing a traceback.
    """


class ArgumentTypeError(GraphDocError, TypeError):
    """An argument of the wrong type (a str for a count): a TypeError, as Python's own, that the CLI still prints
    as one line."""


class InputError(GraphDocError):
    """Bad input data: a missing or unreadable file, a broken line, a duplicate id, a wrong encoding."""


class ModelLoadError(GraphDocError):
    """A model could not be found or loaded, or its weights do not match the expected checksum."""


class IndexMismatchError(GraphDocError):
    """An index was opened with a model or settings other than the ones it was built with."""


class DamagedIndexError(GraphDocError):
    """Files of an index folder's ``final/`` are missing, cut short or disagree with each other.

    ``problem`` names the file and what is wrong with it. ``final/`` is derived from the shards, so
    rerunning the ``graphdoc index`` command rebuilds it.
    """

    def __init__(self, index_dir, problem: str) -> None:
        super().__init__(f"index {index_dir} is damaged: {problem}; rerun the graphdoc index command that built it "
                         "(final/ is rebuilt from the shards), or build it anew in a new folder")
        self.index_dir, self.problem = index_dir, problem

    def __reduce__(self):  # pickled as its arguments (a worker process's error reaches its pool)
        return type(self), (self.index_dir, self.problem)
