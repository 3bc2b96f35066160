from archivist.tools.sparse import document_vector, query_vector, token_id, tokenize


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
