"""Documentation frameworks' pages as their sites show them: front matter names, dumi demos,
VitePress snippets and containers, Docusaurus tabs, API tables cut into chunks."""

import textwrap
from pathlib import Path

from archivist.ingest.loaders.base import LoaderOptions, Section
from archivist.ingest.loaders.includes import included_files
from archivist.ingest.loaders.text import load_markdown
from archivist.ingest.splitter import SplitterSettings, split_text
from archivist.ingest.sync import chunk_sections
from archivist.tools.store import Chunk

BUTTON_ZH = """\
---
title: Button
subtitle: 按钮
description: 按钮用于开始一个即时操作。
---

## 何时使用 {#when-to-use}

标记了一个操作命令，响应用户点击行为。

## 代码演示 {#examples}

<!-- prettier-ignore -->
<code src="./demo/basic.tsx">语法糖</code>
<code src="./demo/loading.tsx" version="5.0.0">加载中状态</code>
<code src="./demo/debug-icon.tsx" debug>调试图标按钮</code>
<code src="./demo/ghost.tsx">幽灵按钮</code>
<code src="./demo/missing.tsx">不存在的演示</code>

## API

按钮的属性说明如下。
"""

LOADING_NOTES = """\
## zh-CN

添加 `loading` 属性即可让按钮处于加载状态。

## en-US

A loading indicator can be added to a button by setting the `loading` property.
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def dumi_site(root: Path) -> Path:
    page = write(root / "button" / "index.zh-CN.md", BUTTON_ZH)
    write(root / "button" / "index.en-US.md", BUTTON_ZH.replace("按钮", "Buttons"))
    write(
        root / "button" / "demo" / "basic.md",
        "## zh-CN\n\n按钮有五种类型。\n\n## en-US\n\nFive types.\n",
    )
    write(
        root / "button" / "demo" / "basic.tsx", "export default () => <Button>Primary</Button>;\n"
    )
    write(root / "button" / "demo" / "loading.md", LOADING_NOTES)
    write(root / "button" / "demo" / "loading.tsx", "const App = () => <Button loading />;\n")
    write(root / "button" / "demo" / "debug-icon.md", "## zh-CN\n\n调试。\n")
    write(
        root / "button" / "demo" / "ghost.tsx",
        "/**\n * title: 幽灵按钮\n * description: 幽灵按钮将按钮的内容反色。\n */\n"
        "export default 1;\n",
    )
    return page


def test_a_dumi_page_reads_its_demos_title_and_description_line_for_line(tmp_path):
    page = dumi_site(tmp_path)
    [section] = load_markdown(page, LoaderOptions(include_root=tmp_path))
    assert section.metadata["subtitle"] == "按钮"
    text = section.text
    assert "<code" not in text and "<!--" not in text and "debug" not in text
    assert "- **语法糖**: 按钮有五种类型。" in text
    assert "- **加载中状态**: 添加 `loading` 属性即可让按钮处于加载状态。" in text
    assert "- **幽灵按钮**: 幽灵按钮将按钮的内容反色。" in text  # the code's JSDoc block
    assert "- **不存在的演示**" in text  # a demo whose files are missing keeps its title
    # The demos' code is left out, and the page's lines stay the file's own.
    assert "export default" not in text and "<Button" not in text
    lines = page.read_text(encoding="utf-8").splitlines()
    assert section.first_line == 6
    loading = text.splitlines().index(
        "- **加载中状态**: 添加 `loading` 属性即可让按钮处于加载状态。"
    )
    assert "loading.tsx" in lines[section.first_line - 1 + loading]
    # The English page reads the English notes; editing a demo's notes changes the page.
    [english] = load_markdown(
        tmp_path / "button" / "index.en-US.md", LoaderOptions(include_root=tmp_path)
    )
    assert "setting the `loading` property" in english.text
    read = included_files(page, page.read_text(encoding="utf-8"), tmp_path)
    assert tmp_path / "button" / "demo" / "loading.md" in read


def test_front_matter_names_and_description_are_indexed_with_the_page(tmp_path):
    page = dumi_site(tmp_path)
    sections = load_markdown(page, LoaderOptions(include_root=tmp_path))
    settings = SplitterSettings(cjk_chunk_size=100, cjk_chunk_overlap=0)
    chunks = chunk_sections("button/index.zh-CN.md", sections, settings)
    first, *others = chunks
    # The page's names head every chunk; its description comes with its first chunk only.
    assert first.index_text.startswith("Button · 按钮\n按钮用于开始一个即时操作。\n\n## 何时使用")
    api = next(c for c in chunks if "## API" in c.text)
    assert api.index_text.startswith("Button · 按钮\n\n## API")
    assert others and all("即时操作" not in c.index_text for c in others)
    assert first.text.startswith("## 何时使用")  # the stored text is the page's own


API = """\
# Table

## API

### rowSelection

Selection of rows.

| Property | Description | Type | Default |
| --- | --- | --- | --- |
{rows}
## Design Guide

Keep tables short.
"""


def test_an_api_table_cut_into_chunks_keeps_its_columns_and_heading(tmp_path):
    rows = "".join(
        f"| prop{n} | What the property number {n} changes in the table | string | - |\n"
        for n in range(30)
    )
    text = API.format(rows=rows)
    settings = SplitterSettings(chunk_size=400, chunk_overlap=0)
    chunks = split_text(text, settings)
    table = [c for c in chunks if "| prop" in c.text]
    assert len(table) > 2
    header = "| Property | Description | Type | Default |\n| --- | --- | --- | --- |"
    # The chunk holding the heading, its sentence and the header also holds rows.
    assert "### rowSelection\n\nSelection of rows." in table[0].text
    assert "| prop0 |" in table[0].text and table[0].table_columns == ""
    for chunk in table[1:]:
        assert chunk.table_columns == header and chunk.text.startswith("| prop")
        assert chunk.headings == ["Table", "API", "rowSelection"]
        assert text[chunk.start : chunk.end] == chunk.text
    # The row's chunk is indexed with the page, the heading path and the columns.
    row = next(c for c in table if "| prop17 |" in c.text)
    metadata = {"title": "Table", "headings": row.headings, "table_columns": row.table_columns}
    indexed = Chunk(row.text, "table.md", 3, metadata).index_text
    assert indexed.startswith(f"Table › API › rowSelection\n{header}\n\n| prop")
    [stored] = [
        c for c in chunk_sections("t.md", [Section(text, {})], settings) if "| prop17 |" in c.text
    ]
    assert stored.metadata["table_columns"] == header


def test_a_heading_is_never_a_chunk_of_its_own():
    table = "| a | b |\n| --- | --- |\n" + "".join(f"| row {n} | value {n} |\n" for n in range(14))
    text = f"# Page\n\nIntro.\n\n## Props\n\n{table}\n## Next\n\nMore text.\n"
    chunks = split_text(text, SplitterSettings(chunk_size=200, chunk_overlap=0))
    assert all(c.text.strip().lstrip("#").strip() not in ("Page", "Props", "Next") for c in chunks)
    props = next(c for c in chunks if "## Props" in c.text)
    assert "| row 0 |" in props.text


def test_a_merged_chunk_names_every_section_it_holds():
    text = "# Button\n\n## Design Guide\n\nShort.\n\n## FAQ\n\nAlso short.\n\n### Wave\n\nOff.\n"
    [chunk] = split_text(text, SplitterSettings(chunk_size=400, chunk_overlap=0))
    assert chunk.headings == ["Button"]  # all within Button
    text = "# Button\n\nIntro.\n\n## Design Guide\n\nShort.\n\n## FAQ\n\nAlso short.\n"
    pieces = split_text(text[text.index("## Design") :], SplitterSettings(400, 0))
    assert [c.headings for c in pieces] == [["Design Guide · FAQ"]]
    upgrade = "Words here. " * 34
    long = f"# Button\n\n## Install\n\n### Upgrade\n\n{upgrade}\n\nTail.\n\n## Support\n\nMail.\n"
    chunks = split_text(long, SplitterSettings(chunk_size=420, chunk_overlap=0))
    assert len(chunks) == 2 and chunks[0].headings == ["Button"]
    assert chunks[-1].headings == ["Button", "Install › Upgrade · Support"]
    assert "## Support" in chunks[-1].text


VITEPRESS = """\
---
title: 响应式基础
---

<script setup>
import { ref } from 'vue'
const count = ref(0)
</script>

# 响应式基础

<div class="composition-api">
<VueSchoolLink href="https://example.com/lesson" title="Free lesson"/>

用 `ref()` 声明<span class="options-api">响应式</span>状态。
见 <abbr title="Single-File Component">SFC</abbr>。

</div>

:::tip 注意
ref 会自动解包。
:::

::: warning
不要解构 reactive 对象。
:::

::: code-group

<<< @/snippets/counter.js#setup{2} [counter.js]

:::
"""


def test_vitepress_snippets_containers_and_scripts_become_text(tmp_path):
    write(
        tmp_path / "snippets" / "counter.js",
        "// #region setup\nconst count = ref(0)\ncount.value++\n// #endregion setup\nexport {}\n",
    )
    page = write(tmp_path / "guide" / "reactivity.md", VITEPRESS)
    [section] = load_markdown(page, LoaderOptions(include_root=tmp_path))
    text = section.text
    assert "<script" not in text and "<div" not in text and "</div>" not in text
    assert "VueSchoolLink" not in text and "<span" not in text and "<abbr" not in text
    assert "用 `ref()` 声明响应式状态。\n见 SFC (Single-File Component)。" in text
    assert ":::" not in text and "<<<" not in text
    assert "**注意**\nref 会自动解包。" in text and "**Warning**\n不要解构" in text
    assert "```javascript\nconst count = ref(0)\ncount.value++\n```" in text
    assert "export {}" not in text  # only the region


DOCUSAURUS = """\
---
title: Installation
---

import Tabs from '@theme/Tabs';
import TabItem from '@theme/TabItem';

# Installation

<Tabs>
  <TabItem value="npm" label="npm">

```bash
npm install archivist
```

  </TabItem>
  <TabItem value="yarn" label="Yarn">

Use yarn add.

  </TabItem>
</Tabs>

:::note[Node version]
Node 18 or later.
:::
"""


def test_a_docusaurus_markdown_page_reads_its_tabs_and_admonitions(tmp_path):
    page = write(tmp_path / "docs" / "install.md", DOCUSAURUS)
    [section] = load_markdown(page, LoaderOptions(include_root=tmp_path))
    text = textwrap.dedent(section.text)
    assert "import " not in text and "<Tab" not in text and "</Tabs>" not in text
    assert "**npm**" in text and "**Yarn**" in text and "Use yarn add." in text
    assert "```bash\nnpm install archivist\n```" in text
    assert "**Node version**\nNode 18 or later." in text
