import hashlib
import json
import pickle
from collections import Counter

import pytest

from archivist.tools import sparse
from archivist.tools.errors import ArchivistError
from archivist.tools.sparse import document_vector, query_vector, token_id, tokenize

# examples/shop (58 chunks, one of them Chinese) under release f4d9d71's splitter and BM25.
SHOP_DIGEST = "a64319fe0346b88ed24716cca1a67d9e4f862918c1c5bbb929d97d36bb859eb9"


def test_words_are_lowercased_stemmed_and_stop_words_dropped():
    assert tokenize("How many Refunds do I have?") == ["many", "refund"]


def test_codes_are_kept_whole_besides_their_parts():
    tokens = tokenize("Boots NW-TX-2290 and RMA-2024-004817")
    assert "nw-tx-2290" in tokens and "rma-2024-004817" in tokens
    assert {"nw", "tx", "2290"} <= set(tokens)


def test_chinese_text_becomes_character_bigrams():
    assert tokenize("关税由收件人承担") == ["关税", "税由", "由收", "收件", "件人", "人承", "承担"]
    assert tokenize("中文 a 好") == ["中文", "好"]


def test_token_ids_are_stable_across_processes():
    # crc32 is fixed by the algorithm, unlike Python's salted hash().
    assert token_id("refund") == 1529615448


def test_document_vector_saturates_repeated_terms():
    indices, values = document_vector("refund refund refund policy")
    weights = dict(zip(indices, values, strict=True))
    assert weights[token_id("refund")] > weights[token_id("policy")]
    assert weights[token_id("refund")] < 3 * weights[token_id("policy")]


def test_query_vector_counts_each_term_once():
    indices, values = query_vector("refund refunds days")
    assert sorted(indices) == sorted({token_id("refund"), token_id("day")})
    assert values == [1.0, 1.0]


def _shop_vectors_digest() -> str:
    """One digest of every shop-sample chunk's id and sparse vector, with the default sizes."""
    from pathlib import Path

    from archivist.ingest.splitter import SplitterSettings
    from archivist.ingest.sync import discover, make_documents

    shop = Path(__file__).resolve().parent.parent / "examples" / "shop"
    files, _, _ = discover([shop])
    digest = hashlib.sha256()
    for file in sorted(files, key=lambda f: f.source):
        for doc in make_documents(file, SplitterSettings()):
            for chunk in doc.chunks:
                digest.update(json.dumps([chunk.id, *document_vector(chunk.text)]).encode())
    return digest.hexdigest()


def test_the_shop_samples_stored_vectors_are_those_of_the_last_release():
    # The digest was taken with the release before the CJK ranges were shared with the
    # splitter: a store it wrote keeps matching chunk ids and BM25 vectors.
    assert _shop_vectors_digest() == SHOP_DIGEST


def test_compatibility_ideographs_are_cjk_for_the_splitter_and_bm25_alike():
    from archivist.ingest.splitter import is_cjk

    text = "\uf900\uf901\uf902\uf903"  # CJK compatibility ideographs
    assert is_cjk(text)
    assert tokenize(text) == ["\uf900\uf901", "\uf901\uf902", "\uf902\uf903"]


def edge_bm25():
    """qdrant-edge's BM25 encoder configured as the new scheme is documented to be."""
    import qdrant_edge as qe

    return qe.Bm25(
        qe.Bm25Config(
            tokenizer=qe.TokenizerType.Multilingual,
            language="english",
            stemmer=qe.SnowballParams(qe.SnowballLanguage.English),
        )
    )


def test_new_stores_scheme_adds_cjk_bigrams_to_the_folded_words():
    assert sparse.DEFAULT_SCHEME == sparse.BIGRAM_SCHEME
    assert sparse.BIGRAM_SCHEME == "bm25-qdrant-multilingual-en-numbers-zhfold-v2-cjkbigrams-v1"
    new = sparse.encoder(sparse.BIGRAM_SCHEME)
    words = sparse.encoder(sparse.FOLDED_TW_SCHEME)
    # Text without CJK characters is indexed as the scheme without bigrams indexes it.
    english = "Refunds are paid within 30 days of order NW-TX-2290."
    assert new.document(english) == words.document(english)
    assert new.query(english) == words.query(english)
    # A question's words count 1 and its bigrams less; each bigram is a term of its own.
    indices, values = new.query("给页面加水印")
    assert len(indices) == len(words.query("给页面加水印")[0]) + 5
    assert sorted(values) == [sparse.BIGRAM_QUERY_WEIGHT] * 5 + [1.0] * (len(indices) - 5)
    # The tokenizer reads 加水印 as 加水 ("add water") and 印, the page's 水印 as one word:
    # only the bigram 水印 joins them. Traditional text is folded first.
    page = set(new.document("页面需要添加水印标识版权时使用")[0])
    assert set(words.query("给页面加水印")[0]) & page == set(words.query("页面")[0])
    assert set(new.query("給頁面加浮水印")[0]) & page > set(words.query("页面")[0])
    # A document's bigram counts saturate as BM25's term frequency does (b = 0): 水印 twice,
    # 印水 once.
    stored = dict(zip(*new.document("水印水印"), strict=True))
    bigrams = [v for i, v in stored.items() if i not in set(words.document("水印水印")[0])]
    assert sorted(bigrams) == pytest.approx([1.0, 2 * 2.2 / 3.2])


def test_the_scheme_without_bigrams_still_indexes_as_it_did():
    assert sparse.FOLDED_TW_SCHEME == "bm25-qdrant-multilingual-en-numbers-zhfold-v2"
    folded = sparse.encoder(sparse.FOLDED_TW_SCHEME)
    edge = sparse.encoder(sparse.EDGE_SCHEME)
    # Simplified Chinese and other scripts are indexed as the unfolded scheme indexes them.
    simplified = "Refunds are paid within a month. 关税由收件人承担，程序会自动退款。"
    assert folded.document(simplified) == edge.document(simplified)
    # Traditional text, with Taiwan words, gets the terms of its Simplified, mainland twin,
    # those OpenCC maps (載入, 預設) and those of our table (全域, 回饋, 清單).
    assert folded.document("按鈕的載入狀態與預設值") == edge.document("按钮的加载状态与默认值")
    assert folded.query("表格行選擇") == edge.query("表格行选择")
    assert folded.query("按鈕載入狀態") != edge.query("按鈕載入狀態")
    assert folded.document("全域設定的回饋清單") == edge.document("全局设置的反馈列表")


def test_the_previous_folded_scheme_still_folds_with_opencc_words_alone():
    assert sparse.FOLDED_SCHEME == "bm25-qdrant-multilingual-en-numbers-zhfold-v1"
    previous = sparse.encoder(sparse.FOLDED_SCHEME)
    edge = sparse.encoder(sparse.EDGE_SCHEME)
    # Its stores were built without the table: their vectors and queries stay as they were.
    assert previous.document("全域設定的回饋清單") == edge.document("全域设置的回馈清单")
    assert previous.query("按鈕載入狀態") == edge.query("按钮加载状态")
    assert sparse.fold_chinese("全域設定", terms=False) == "全域设置"


def test_taiwan_terms_are_words_opencc_leaves_and_fold_into_mainland_words():
    import opencc

    taiwan = opencc.OpenCC("tw2sp")
    rows = [
        line.split("\t")
        for line in sparse.TAIWAN_TERMS.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert 20 <= len(rows) <= 80  # small: a supplement to OpenCC's table, not a second one
    for word, mainland in rows:
        assert taiwan.convert(word) != mainland, word  # OpenCC does not map it already
        # In a Traditional sentence, the word comes out as the mainland's.
        assert mainland in sparse.fold_chinese(f"這個{word}的說明"), word
    assert sparse.fold_chinese("儲存格的值") == "单元格的值"  # found as tw2sp leaves it
    assert sparse.fold_chinese("拖曳上傳檔案") == "拖拽上传文件"
    # Simplified text is not read as Taiwan's: its own 清单 stays.
    assert sparse.fold_chinese("购物清单和全域网络") == "购物清单和全域网络"


def test_only_traditional_text_is_folded_and_into_mainland_words():
    assert sparse.fold_chinese("按鈕載入狀態") == "按钮加载状态"
    assert sparse.fold_chinese("軟體的預設值") == "软件的默认值"
    # Simplified text stays as written: tw2sp would read 程序 (a program) as Taiwan's process.
    assert sparse.fold_chinese("程序的默认值") == "程序的默认值"
    # One Traditional name quoted in a Simplified page does not make the page Traditional.
    page = "这个程序用于处理订单和退款，支持多种支付方式，并在完成后发送通知。" + "臺"
    assert sparse.fold_chinese(page) == page
    assert sparse.fold_chinese("Plain English, 404.") == "Plain English, 404."


def test_the_unfolded_scheme_is_qdrant_edges_bm25_with_ones_for_queries():
    assert sparse.EDGE_SCHEME == "bm25-qdrant-multilingual-en-numbers-v1"
    edge = sparse.encoder(sparse.EDGE_SCHEME)
    text = "Refunds are paid within a month. 关税由收件人承担。 Boots NW-TX-B."
    expected = edge_bm25().embed_document(text)
    assert edge.document(text) == (expected.indices, expected.values)
    indices, values = edge.query("refunds refund days 关税")
    assert indices == edge_bm25().embed_query("refunds refund days 关税").indices
    assert len(indices) == len(set(indices)) >= 3 and values == [1.0] * len(indices)


def test_the_legacy_scheme_is_our_tokenizer():
    legacy = sparse.encoder(sparse.LEGACY_SCHEME)
    assert sparse.LEGACY_SCHEME == "bm25-crc32-cjkbigram-v1"
    assert legacy.document("refund refund policy") == document_vector("refund refund policy")
    assert legacy.query("refunds days") == query_vector("refunds days")


def test_an_encoder_travels_to_another_process_by_its_schemes_name():
    for scheme in sparse.SCHEMES:
        data = pickle.dumps(sparse.encoder(scheme))
        assert scheme.encode() in data and b"qdrant_edge" not in data
        assert pickle.loads(data) is sparse.encoder(scheme)


def test_an_unknown_scheme_is_refused_with_the_fix():
    with pytest.raises(ArchivistError) as refused:
        sparse.encoder("bm25-future-v9")
    assert "'bm25-future-v9'" in refused.value.message
    assert "Upgrade Archivist" in refused.value.fix and "--reindex" in refused.value.fix


def test_a_number_stands_alone_after_anything_but_a_letter_a_digit_or_a_point():
    text = "404 opens it; a1 b22 .5 1.5.x 7a ４２ 3-4 x.9 2024-05-01 (88) 12."
    assert sparse._numbers(text) == Counter(
        ["404", "1.5", "４２", "3", "4", "2024", "05", "01", "88", "12"]
    )


def test_numbers_standing_alone_are_added_to_edges_terms_once_each():
    edge = sparse.encoder(sparse.EDGE_SCHEME)
    text = "Order NW-TX-2290 ships in 30 days; order 2290 again. Pi is 3.14. v1.2.3 E404 mp3."
    own = edge_bm25().embed_document(text)
    indices, values = edge.document(text)
    weights = dict(zip(indices, values, strict=True))
    added = {sparse.token_id(n): w for n, w in (("2290", 1.375), ("30", 1.0), ("3.14", 1.0))}
    assert weights == {**dict(zip(own.indices, own.values, strict=True)), **added}
    assert indices == sorted(indices)
    query, ones = edge.query("what ships in 30 days, order 2290?")
    assert {sparse.token_id("30"), sparse.token_id("2290")} < set(query) and set(ones) == {1.0}
    # "1.2.3" of v1.2.3, "404" of E404 and "3" of mp3 are parts of Edge's own terms.
    for joined in ("1.2.3", "2.3", "404", "3"):
        assert sparse.token_id(joined) not in weights
