from ingest.splitter import SplitterSettings, is_cjk, split_text

SMALL = SplitterSettings(chunk_size=300, chunk_overlap=60, cjk_chunk_size=120, cjk_chunk_overlap=20)


def test_offsets_slice_the_text_back_to_each_chunk():
    text = "# Title\n\n" + "\n\n".join(f"Paragraph {i}. " + "word " * 40 for i in range(8))
    chunks = split_text(text, SMALL)
    assert len(chunks) > 3
    for chunk in chunks:
        assert text[chunk.start : chunk.end] == chunk.text
        assert len(chunk.text) <= SMALL.chunk_size
    # Together the chunks cover every paragraph.
    for i in range(8):
        assert any(f"Paragraph {i}." in c.text for c in chunks)


def test_fenced_code_blocks_and_tables_stay_whole():
    code = "```python\n" + "\n".join(f"x{i} = {i}  # line {i}" for i in range(22)) + "\n```"
    table = "| code | meaning |\n|---|---|\n" + "\n".join(
        f"| E{i} | error {i} |" for i in range(20)
    )
    assert 300 < len(code) < 600 and 300 < len(table) < 600
    text = f"# Codes\n\nIntro text.\n\n{code}\n\nBetween.\n\n{table}\n\nAfter."
    chunks = split_text(text, SMALL)
    assert sum(code in c.text for c in chunks) >= 1
    assert sum(table in c.text for c in chunks) >= 1
    assert not any("x3 = 3" in c.text and code not in c.text for c in chunks)


def test_code_block_over_the_hard_limit_is_cut_by_lines():
    code = "```\n" + "\n".join(f"line {i:04d} " + "x" * 30 for i in range(40)) + "\n```"
    chunks = split_text(code, SMALL)
    assert len(chunks) > 1
    assert all(len(c.text) <= SMALL.chunk_size for c in chunks)
    assert all(c.text.startswith(("```", "line")) for c in chunks)


def test_chinese_text_splits_at_chinese_sentence_ends():
    sentence = "退货需要在三十天内提出申请并附上订单号。"
    text = "# 退货\n\n" + sentence * 30
    assert is_cjk(text)
    chunks = split_text(text, SMALL)
    assert len(chunks) > 2
    for chunk in chunks[1:]:
        assert len(chunk.text) <= SMALL.cjk_chunk_size
        assert chunk.text.endswith("。")
        assert text[chunk.start : chunk.end] == chunk.text


def test_heading_path_is_recorded_per_chunk():
    text = (
        "# Shop\n\nIntro "
        + "a " * 100
        + "\n\n## Refunds\n\nRefunds take 30 days. "
        + "b " * 100
        + "\n\n### Damaged goods\n\nReport within 48 hours. "
        + "c " * 100
    )
    chunks = split_text(text, SMALL)
    by_text = {c.text.split("\n")[0]: c.headings for c in chunks}
    assert by_text["## Refunds"] == ["Shop", "Refunds"]
    assert by_text["### Damaged goods"] == ["Shop", "Refunds", "Damaged goods"]


def test_front_matter_free_empty_text_gives_no_chunks():
    assert split_text("   \n\n  ") == []
