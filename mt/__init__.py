"""mt: a small, real toolkit for Transformer machine translation.

    from mt import Translator
    translator = Translator.from_run("runs/multi30k", beam=5)
    translator.translate(["Ein Hund rennt im Schnee."])

`import mt` imports no torch: Translator (mt.translator) is imported when first asked for.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "Translator":
        from mt.translator import Translator

        return Translator
    raise AttributeError(f"module 'mt' has no attribute {name!r}")
