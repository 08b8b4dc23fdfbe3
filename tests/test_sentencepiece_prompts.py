"""A SentencePiece-style tokenizer configured ``legacy=False`` (``Metaspace`` pre-tokenizer, ``prepend_scheme=
"first"``): brrm's prompt ids equal ``apply_chat_template``'s (issue 32, item 2). Tokenizing the whole rendered
prompt prepends ``▁`` only at its very start, so the text after ``<s>`` begins ``[`` not ``▁[``; brrm encodes the
prompt piece by piece and must leave the ``▁`` out of every piece but the first. The legacy layout (a ``Prepend``
normalizer, applied to each piece) keeps its own behaviour."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from brrm.tokens import TextEncoder

CORPUS = ["[INST] hello there [/INST] fine thanks", "[The Begin of Context]\nUser: what is it", "[INST] [x] ok"] * 20
TEMPLATE = "{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"


def _tokenizer(legacy: bool) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    if legacy:  # LlamaTokenizerFast legacy=True: Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
    else:  # legacy=False: Metaspace, "▁" before the first piece only
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"],
                                                        initial_alphabet=list("▁[]")))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.chat_template = TEMPLATE
    return fast


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "hello there"}],
    [{"role": "user", "content": "[The Begin of Context]\nUser: what is it"},
     {"role": "assistant", "content": "fine thanks"}, {"role": "user", "content": "[x] ok [y]"}],
])
def test_prompt_ids_equal_apply_chat_template(legacy, messages):
    tok = _tokenizer(legacy)
    want = list(tok.apply_chat_template(messages, tokenize=True, return_dict=False))
    _, ids = TextEncoder(tok).chat(messages, add_generation_prompt=False)
    assert ids == want, (tok.convert_ids_to_tokens(ids), tok.convert_ids_to_tokens(want))


def test_the_case_the_issue_names():
    tok = _tokenizer(legacy=False)
    _, ids = TextEncoder(tok).chat([{"role": "user", "content": "hello there"}], add_generation_prompt=False)
    assert tok.convert_ids_to_tokens(ids[:2]) == ["<s>", "["]  # not "▁[" after <s>
