"""CTranslate2, the C++ inference engine, as a second way to decode an mt model: `export` writes a
model as a CTranslate2 model directory (`mt export`), `engine` loads one and searches with it
(`Ct2Model`), answering as `decode.search` does (mt's `Hypothesis` lists, scored by mt's GNMT
penalty), so that `translate.search_lines` serves translate, evaluate and serve with either engine.
CTranslate2 is an optional extra (`pip install 'mt[ctranslate2]'`); without it only this engine is
refused.

Each ModelConfig and DecodeConfig field is mapped in a table (export.MODEL_FIELDS,
engine.DECODE_FIELDS) or refused in one line when set (`export.unmapped`), never silently ignored.
"""
