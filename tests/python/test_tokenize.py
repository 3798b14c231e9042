"""`sluice tokenize` against Hugging Face's `tokenizers` wheel: tokenizers of each model kind, trained
here with that library (WordPiece with BertNormalizer, Unigram with Metaspace and NFKC, byte-level BPE
like GPT-2 and RoBERTa, and ones that use the remaining normalizers and pre-tokenizers), over a
hostile corpus (CJK, combining accents, emoji with ZWJ, right-to-left, control characters, NUL,
10,000-character words, empty strings, lone surrogates in JSON escapes): the ids must be identical on
every passage.  The wheel is the reference; Sluice runs no Python (docs/text.md)."""
import json
import os
import random
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from support.sluice_test import BIN  # noqa: E402

tokenizers = pytest.importorskip("tokenizers", reason="pip install tokenizers (data_tools/requirements.txt)")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

if not os.access(BIN, os.X_OK):
    pytest.skip(f"no sluice binary at {BIN} (set SLUICE_BIN)", allow_module_level=True)


# ---- the corpus ----------------------------------------------------------------------------------

HOSTILE = [
    "", " ", "   ", "\t", "\t\t \u00a0", "a", "A", ".",
    "Hello, world! It's 2026... don't you think? I'm sure we'll see; they've gone, she'd left.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG", "the quick brown fox jumps over the lazy dog",
    "'s 're 'LL 'VE ’s ‘quoted’ “double” «guillemets» „low“",
    "北京欢迎你。東京都、日本語のテキストです！", "한국어 텍스트와 조합형 한글", "abc中文def混合123", "漢字漢字漢字漢字",
    "\U00020000\U0002A700\U0002B820\U0002B920\U0002CEAF\uF900\U0002F800", "ｶﾀｶﾅ ＡＢＣ１２３ ﾟﾞ",
    "e\u0301", "Cafe\u0301 na\u0308ive re\u0301sume\u0301", "ñ vs n\u0303", "a\u0300\u0301\u0302\u0303\u0304\u0305",
    "Z\u0351\u0352\u0353a\u0354\u0355l\u0356g\u0357\u0358o\u0359", "\u0301\u0301 leading marks", "o\u0328\u0301 ǫ́",
    "Ångström Ελληνικά ΟΔΥΣΣΕΥΣ Σ ς İstanbul ıi Straße STRASSE ǅ ǈ ǋ", "Ⅻ ⅻ ① ⑳ ½ x² H₂O ㍿ ﬁ ﬀ ℌ ℡ ™",
    "👨\u200d👩\u200d👧\u200d👦 family", "🏳️\u200d🌈 flag", "👍🏽👍🏿", "🇫🇷🇩🇪🇯🇵", "1️⃣ #️⃣", "🫠🥲🦀 new emoji", "😀😃😄😁😆😅🤣😂",
    "مرحبا بالعالم", "שלום עולם", "abc \u200fמימין\u200e def", "\u202eevil\u202c text", "العربية ٣٤٥ ١٢٣",
    "हिन्दी देवनागरी १२३", "ภาษาไทยไม่มีช่องว่าง", "ქართული", "Ελληνικά και русский текст",
    "\x00", "a\x00b", "\x00\x00\x00", "\x01\x02\x03\x7f", "\x1b[31mred\x1b[0m", "bell\x07 back\x08space",
    "\u0085next line", "line\u2028sep\u2029para", "\ufeffBOM", "soft\u00adhyphen", "zero\u200bwidth", "mongolian\u180evowel",
    "ide\u3000ographic", "em\u2003space thin\u2009space", "tab\tnew\nline\rreturn\r\nboth", "\x1c\x1d\x1e\x1f seps",
    "private \ue000\uf8ff \U000F0000", "tag\U000E0001\U000E0041 chars", "noncharacter \ufffe\uffff", "replacement \ufffd char",
    "https://example.com/a?b=c&d=e#frag", "def f(x):\n    return x ** 2  # square", "<html><body class=\"x\">hi</body></html>",
    "3.14159 1,000,000 -42 +7 1e-9 0x1F", "!!!!!!!! ???? .... ---- ____ ****", "a_b_c snake_case CamelCase kebab-case",
    "[CLS] hello [SEP]", "[UNK] [MASK] [PAD]", "<s>begin</s>", "<mask> masked <mask>", "a<mask>b", " <mask> ", "<unk> <pad>",
    "<|endoftext|>next doc", "hello world", "HELLO WORLD", "helloworld", "hello_world", "xhello", " hello ",
    "<0x41> <0x00>", "▁ ▁▁ ▁a", "Ġ Ġa ĠĠ", "##ing ##", "@@ @@", "hello\u0301",
    "\U0001D400\U0001D401\U0001D402 math bold", "\U0001F600" * 20, "a" * 300, "ab " * 200,
    "a" * 10000, "é" * 10000, "e\u0301" * 5000, "ab" * 5000, "中" * 10000, "1" * 10000, " " * 10000, "x " * 5000,
    "\U0001F468\u200d" * 3000, "!" * 10000, "\u0301" * 10000, "Ab1_" * 2500,
    # lone surrogates (JSON escapes \\udXXX): read as U+FFFD
    "\ud800", "a\udc00b", "\ud83d", "half \ud83d emoji", "\ude00\ud83d reversed", "\ud83d\ude00 pair", "\udbff\udfff max",
]

SCRIPTS = [
    (0x20, 0x7E), (0x20, 0x7E), (0x20, 0x7E), (0x20, 0x7E), (0xA0, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
    (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE5B), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2070, 0x209F),
    (0x20A0, 0x20BF), (0x2100, 0x214F), (0x2150, 0x218F), (0x2460, 0x24FF), (0x3000, 0x303F), (0x3040, 0x30FF),
    (0x4E00, 0x4F00), (0xAC00, 0xAD00), (0xFB00, 0xFB06), (0xFE70, 0xFEFF), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F),
    (0x1F900, 0x1F9FF), (0x0, 0x1F), (0x1D400, 0x1D4FF),
]
ZWJ_PIECES = ["\u200d", "\ufe0f", "\U0001F3FD", " ", "  ", "\n", "\u00a0"]


def random_passages(n, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 60)):
            if rng.random() < 0.1:
                chars.append(rng.choice(ZWJ_PIECES))
                continue
            lo, hi = rng.choice(SCRIPTS)
            run = rng.randint(1, 8)
            chars.extend(chr(rng.randint(lo, hi)) for _ in range(run))
        s = "".join(chars)
        out.append("".join(c for c in s if not 0xD800 <= ord(c) <= 0xDFFF))
    return out


# The reference reads character properties from tables of several Unicode versions (docs/text.md): its
# Bert punctuation, control and accent tables are of Unicode 8.0, its normalization of 9.0.  Sluice reads
# ICU's tables filtered by each character's age, which cannot tell a character whose category changed
# since: these few (U+166D Po->So, U+1734 Mn->Mc, U+1885/6 Lo->Mn, U+A9BD Mc->Mn, U+111C9 Po->Mn,
# U+1CF2/3 Mc->Lo) are left out of the every-character passages.
CATEGORY_CHANGED = {0x166D, 0x1734, 0x1885, 0x1886, 0xA9BD, 0x111C9, 0x1CF2, 0x1CF3}


def every_character_passages(per_passage=40):
    """Every character assigned by Python's Unicode tables (14.0 for Python 3.11: the newest that every
    library here knows; PCRE2 10.42 stops there) up to U+323AF and the tags and variation selectors of
    plane 14, each between two letters, before a digit and alone, `per_passage` to a passage."""
    import unicodedata
    cps = [c for c in list(range(0x32400)) + list(range(0xE0000, 0xE01F0))
           if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn" and c not in CATEGORY_CHANGED]
    return ["".join(f"a{chr(c)}b {chr(c)}1 {chr(c)} " for c in cps[i:i + per_passage]) for i in range(0, len(cps), per_passage)]


def training_text():
    """Sentences of English-like words and of other scripts, so that vocabularies hold many characters."""
    rng = random.Random(11)
    syll = ["the", "qu", "ick", "br", "own", "fox", "jump", "s", "over", "la", "zy", "dog", "ing", "tion", "er", "hello",
            "world", "token", "ize", "un", "believ", "able", "caf", "é", "na", "ïve", "straße", "北京", "欢迎", "你", "日本",
            "語", "한국", "어", "مرحبا", "שלום", "हिन्दी", "ภาษา", "ไทย", "ελλην", "ικά", "рус", "ский", "123", "2026", "3.14",
            "😀", "👍", "🏽", "\u200d", ",", ".", "!", "?", "'s", "'t", "-", "(", ")", "\"", ":", ";", "_", "#", "@", "ｶﾀｶﾅ", "①", "ﬁ"]
    lines = []
    for _ in range(3000):
        words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(3, 14))]
        line = " ".join(words)
        if rng.random() < 0.3:
            line = line.capitalize()
        if rng.random() < 0.1:
            line = line.upper()
        lines.append(line)
    return lines + HOSTILE[:60]


# ---- the tokenizers, trained here ----------------------------------------------------------------

BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def wordpiece_bert(lines):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=1500, special_tokens=BERT_SPECIALS))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    return tok


def wordpiece_cased(lines):
    """Cased, no accent stripping, NFC first, Whitespace and individual Digits, a short max word, added
    tokens with single_word and rstrip."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=12))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(),
                                           normalizers.BertNormalizer(lowercase=False, strip_accents=False, handle_chinese_chars=True)])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=True)])
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=1200, special_tokens=BERT_SPECIALS,
                                                             continuing_subword_prefix="##"))
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")), ("[CLS]", tok.token_to_id("[CLS]")))
    tok.add_tokens([AddedToken("hello", single_word=True), AddedToken("world", rstrip=True, lstrip=True),
                    AddedToken("HELLO", normalized=False)])
    return tok


def unigram_metaspace(lines):
    """As SentencePiece's Unigram: Nmt, NFKC, runs of spaces to one, Metaspace."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(lines, trainers.UnigramTrainer(vocab_size=1500, special_tokens=["<pad>", "</s>", "<unk>"],
                                                           unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return tok


def unigram_byte_fallback(lines):
    """The trained pieces again, with <0x00>..<0xFF> and byte_fallback; Metaspace 'first', unsplit; NFKD, Lowercase."""
    base = json.loads(unigram_metaspace(lines).to_str())["model"]
    vocab = [tuple(v) for v in base["vocab"]] + [(f"<0x{b:02X}>", -20.0) for b in range(256)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=base["unk_id"], byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.add_special_tokens(["<mask>"])
    return tok


def bpe_gpt2(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def bpe_roberta(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return tok


def bpe_mixed(lines):
    """BPE with unk, a continuing-subword prefix, an end-of-word suffix and byte fallback, behind the rest of
    the normalizers (NFD, StripAccents, Lowercase, Strip, Replace, Prepend) and pre-tokenizers (Split by
    regex and by string, Punctuation, Digits, WhitespaceSplit)."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                           normalizers.Strip(), normalizers.Replace("ß", "ss"), normalizers.Prepend("^")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"\p{N}+"), behavior="isolated"),
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.WhitespaceSplit(),
    ])
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=1200, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                                                       continuing_subword_prefix="##", end_of_word_suffix="</w>", limit_alphabet=200))
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    return tok


def bpe_llama_like(lines):
    """Byte fallback BPE (no byte-level), Metaspace-free SentencePiece style: Replace ' ' by ▁, Prepend ▁,
    ignore_merges; and a Split with a GPT-4-like regex in front of ByteLevel without its own regex."""
    tok = Tokenizer(models.BPE(byte_fallback=True, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                             behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|begin|>", "<|end|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<|begin|> $A", special_tokens=[("<|begin|>", tok.token_to_id("<|begin|>"))])
    return tok


def sentencepiece_charsmap():
    """SentencePiece's nmt_nfkc character map, as its trainer compiles it (the data does not matter)."""
    import io

    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(["ab cd ef"] * 50), model_writer=model, vocab_size=12,
                                   hard_vocab_limit=False, normalization_rule_name="nmt_nfkc", minloglevel=2)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    return proto.normalizer_spec.precompiled_charsmap


def unigram_precompiled(lines):
    """As the converted SentencePiece files (T5, XLM-R): the Precompiled map, then Metaspace."""
    tok = unigram_metaspace(lines)
    tok.normalizer = normalizers.Precompiled(sentencepiece_charsmap())
    return tok


KINDS = {
    "wordpiece-bert": wordpiece_bert,
    "wordpiece-cased": wordpiece_cased,
    "unigram-metaspace": unigram_metaspace,
    "unigram-byte-fallback": unigram_byte_fallback,
    "bpe-gpt2": bpe_gpt2,
    "bpe-roberta": bpe_roberta,
    "bpe-mixed": bpe_mixed,
    "bpe-llama-like": bpe_llama_like,
}
try:
    import sentencepiece  # noqa: F401  (data_tools/requirements.txt)
    KINDS["unigram-precompiled"] = unigram_precompiled
except ImportError:
    pass


# ---- running both -------------------------------------------------------------------------------

def readable(s):
    """What Sluice reads from the JSON escapes of s: a surrogate pair is its character, a lone surrogate U+FFFD."""
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def sluice_ids(tokenizer_path, input_path, *extra):
    r = subprocess.run([BIN, "tokenize", "--tokenizer", str(tokenizer_path), "--input", str(input_path), *map(str, extra)],
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return [json.loads(line) for line in r.stdout.decode().splitlines()]


def reference_ids(tok, passages, max_length=None):
    if max_length:
        tok.enable_truncation(max_length=max_length)
    else:
        tok.no_truncation()
    return [e.ids for e in tok.encode_batch([readable(p) for p in passages])]


def mismatches(ours, theirs, passages):
    assert len(ours) == len(theirs), f"{len(ours)} lines for {len(theirs)} passages"
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    return [f"passage {i} {passages[i][:40]!r}: sluice {ours[i][:12]} ... reference {theirs[i][:12]} ..." for i in bad]


@pytest.fixture(scope="module")
def corpus():
    return HOSTILE + random_passages(300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    lines = training_text()
    root = tmp_path_factory.mktemp("tokenizers")
    out = {}
    for name, make in KINDS.items():
        tok = make(lines)
        folder = root / name
        folder.mkdir()
        tok.save(str(folder / "tokenizer.json"))
        out[name] = (tok, folder)
    return out


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory, corpus):
    path = tmp_path_factory.mktemp("corpus") / "hostile.jsonl"
    with open(path, "w", encoding="ascii") as f:
        for p in corpus:
            f.write(json.dumps({"id": len(p), "text": p}, ensure_ascii=True) + "\n")
    return path


@pytest.mark.parametrize("kind", list(KINDS))
def test_ids_match_the_wheel(kind, trained, corpus, corpus_file):
    tok, folder = trained[kind]
    ours = sluice_ids(folder, corpus_file)               # the model folder
    theirs = reference_ids(tok, corpus)
    bad = mismatches(ours, theirs, corpus)
    print(f"{kind}: {len(corpus)} passages, {len(bad)} mismatches")
    assert not bad, "\n".join(bad[:10])


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_character_matches_the_wheel(kind, trained, tmp_path):
    import unicodedata
    if unicodedata.unidata_version != "14.0.0":
        pytest.skip(f"Python's Unicode tables are {unicodedata.unidata_version}; the passages are made from 14.0's")
    passages = every_character_passages()
    path = tmp_path / "every.jsonl"
    path.write_text("".join(json.dumps({"text": p}) + "\n" for p in passages))
    tok, folder = trained[kind]
    bad = mismatches(sluice_ids(folder, path), reference_ids(tok, passages), passages)
    print(f"{kind}: {len(passages)} passages of every character, {len(bad)} mismatches")
    assert not bad, "\n".join(bad[:10])


@pytest.mark.parametrize("kind", ["wordpiece-bert", "unigram-metaspace", "bpe-roberta", "bpe-llama-like"])
@pytest.mark.parametrize("max_length", [1, 2, 3, 16])
def test_truncation_matches_the_wheel(kind, max_length, trained, corpus, corpus_file):
    tok, folder = trained[kind]
    specials = tok.post_processor.num_special_tokens_to_add(False) if tok.post_processor else 0
    if max_length < specials:
        r = subprocess.run([BIN, "tokenize", "--tokenizer", folder / "tokenizer.json", "--input", corpus_file,
                            "--max-length", str(max_length)], capture_output=True, text=True)
        assert r.returncode == 2 and "special tokens" in r.stderr and r.stdout == "", r.stderr
        return
    ours = sluice_ids(folder / "tokenizer.json", corpus_file, "--max-length", max_length)
    theirs = reference_ids(tok, corpus, max_length)
    assert all(len(ids) <= max_length for ids in ours)
    bad = mismatches(ours, theirs, corpus)
    assert not bad, "\n".join(bad[:10])


@pytest.mark.parametrize("direction", ["right", "left"])
def test_the_files_own_truncation_and_no_special_tokens(direction, trained, corpus, corpus_file, tmp_path):
    """tokenizer.json's "truncation" applies without --max-length (either direction); --no-special-tokens
    is the wheel's add_special_tokens=False."""
    tok, folder = trained["wordpiece-bert"]
    saved = Tokenizer.from_str(tok.to_str())
    saved.enable_truncation(max_length=9, direction=direction)
    path = tmp_path / "tokenizer.json"
    saved.save(str(path))
    clean = [readable(p) for p in corpus]
    assert sluice_ids(path, corpus_file) == [e.ids for e in saved.encode_batch(clean)]
    assert sluice_ids(path, corpus_file, "--no-special-tokens") == [e.ids for e in saved.encode_batch(clean, add_special_tokens=False)]


def test_utf8_jsonl_and_plain_text(trained, corpus, tmp_path):
    """The same passages as raw UTF-8 JSONL, and as plain text (one a line: those without line breaks)."""
    tok, folder = trained["bpe-roberta"]
    clean = [readable(p) for p in corpus]
    jl = tmp_path / "raw.jsonl"
    jl.write_text("".join(json.dumps({"body": p}, ensure_ascii=False) + "\n" for p in clean), encoding="utf-8")
    assert sluice_ids(folder, jl, "--text-field", "body") == reference_ids(tok, clean)
    lines = [p for p in clean if "\n" not in p and "\r" not in p and "\x85" not in p and "\u2028" not in p and "\u2029" not in p]
    txt = tmp_path / "plain.txt"
    txt.write_bytes("".join(p + "\n" for p in lines).encode("utf-8"))
    assert sluice_ids(folder, txt) == reference_ids(tok, lines)
    # Ill-formed UTF-8 in plain text reads as U+FFFD, one a maximal ill-formed subpart (Python's "replace").
    raw = [b"caf\xc3", b"\xff\xfeab", b"\xed\xa0\x80x", b"ok \xe2\x82 \xf0\x9f\x98", b"\xc0\xaf overlong", b"\xf4\x90\x80\x80 big"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\n".join(raw) + b"\n")
    assert sluice_ids(folder, bad) == reference_ids(tok, [r.decode("utf-8", errors="replace") for r in raw])


def test_bad_input_is_one_clear_error(trained, tmp_path):
    _, folder = trained["wordpiece-bert"]

    def run(*args):
        r = subprocess.run([BIN, "tokenize", *map(str, args)], capture_output=True, text=True)
        return r.returncode, r.stderr

    good = tmp_path / "in.jsonl"
    good.write_text('{"text": "a"}\n')
    code, err = run("--tokenizer", tmp_path / "nowhere", "--input", good)
    assert code == 3 and "no such tokenizer" in err, err
    code, err = run("--tokenizer", tmp_path, "--input", good)
    assert code == 3 and "holds no tokenizer.json" in err, err
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    code, err = run("--tokenizer", broken, "--input", good)
    assert code == 3 and "not JSON" in err, err
    odd = tmp_path / "odd" / "tokenizer.json"
    odd.parent.mkdir()
    j = json.loads((folder / "tokenizer.json").read_text())
    j["pre_tokenizer"] = {"type": "UnicodeScripts"}
    odd.write_text(json.dumps(j))
    code, err = run("--tokenizer", odd, "--input", good)
    assert code == 3 and "UnicodeScripts" in err and "not supported" in err, err
    for text, needle in [('{"text": "a"}\n{"body": "b"}\n', ':2: no field "text"'), ('{"text": 5}\n', "not a string"),
                         ('{"text": "a"}\n\n{"text": "b"}\n', ":2: an empty line"), ("[1, 2]\n", "not a JSON object"),
                         ('{"text": "a"\n', ":1: not JSON")]:
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        code, err = run("--tokenizer", folder, "--input", bad)
        assert code == 3 and needle in err and err.count("\n") <= 2, (text, err)
    code, err = run("--tokenizer", folder, "--input", tmp_path / "missing.jsonl")
    assert code == 3 and "cannot read the input" in err, err
