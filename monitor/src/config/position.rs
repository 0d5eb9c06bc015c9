//! Where things are in the config text: the line of a byte offset, the key whose value covers an offset (for the
//! TOML parser's errors), and the line a key path is written on (for [`super::Problem`]s). The text is parsed once
//! into a [`Positions`] however many problems are placed.

use super::KeyPart::{self, Index, Key};

/// The text parsed for placing keys, and where its lines start.
pub(super) struct Positions<'a> {
    doc: Option<toml_edit::ImDocument<&'a str>>,
    /// Byte offset of each line's start.
    starts: Vec<usize>,
}

impl<'a> Positions<'a> {
    pub(super) fn new(text: &'a str) -> Positions<'a> {
        let starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Positions { doc: toml_edit::ImDocument::parse(text).ok(), starts }
    }

    /// 1-based line of a byte offset.
    pub(super) fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset).max(1)
    }

    /// The line where a key path is written, if it is.
    pub(super) fn locate(&self, key: &[KeyPart]) -> Option<usize> {
        enum Node<'a> {
            Item(&'a toml_edit::Item),
            Table(&'a toml_edit::Table),
        }
        let mut node = Node::Table(self.doc.as_ref()?.as_table());
        let mut span = None;
        for part in key {
            node = match (part, node) {
                (Key(k), Node::Table(t)) => {
                    let (key, value) = t.get_key_value(k)?;
                    span = key.span().or(span);
                    Node::Item(value)
                }
                (Key(k), Node::Item(item)) => {
                    let (key, value) = item.as_table_like()?.get_key_value(k)?;
                    span = key.span().or(span);
                    Node::Item(value)
                }
                (Index(i), Node::Item(item)) => {
                    let t = item.as_array_of_tables()?.get(*i)?;
                    span = t.span().or(span);
                    Node::Table(t)
                }
                (Index(_), Node::Table(_)) => return None,
            };
        }
        span.map(|s| self.line_of(s.start))
    }

    /// The dotted key (`policy.refuse_at`, `process[1].port`) whose value covers byte `offset`, if any.
    pub(super) fn key_at(&self, offset: usize) -> Option<String> {
        walk(self.doc.as_ref()?.as_table(), offset, "")
    }
}

fn walk(t: &dyn toml_edit::TableLike, offset: usize, prefix: &str) -> Option<String> {
    for (k, item) in t.iter() {
        let name = if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
        match item {
            toml_edit::Item::Value(v) => {
                if let Some(inner) = v.as_inline_table() {
                    if let Some(found) = walk(inner, offset, &name) {
                        return Some(found);
                    }
                }
                if v.span().is_some_and(|s| s.contains(&offset)) {
                    return Some(name);
                }
            }
            toml_edit::Item::Table(t) => {
                if let Some(found) = walk(t, offset, &name) {
                    return Some(found);
                }
            }
            toml_edit::Item::ArrayOfTables(a) => {
                for (i, t) in a.iter().enumerate() {
                    if let Some(found) = walk(t, offset, &format!("{name}[{i}]")) {
                        return Some(found);
                    }
                }
            }
            toml_edit::Item::None => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_offsets() {
        let p = Positions::new("a = 1\n\n[b]\nc = 2\n");
        assert_eq!([0, 5, 6, 7, 10, 11, 16, 17, 99].map(|o| p.line_of(o)), [1, 1, 2, 3, 3, 4, 4, 5, 5]);
        assert_eq!(p.locate(&[Key("b"), Key("c")]), Some(4));
        assert_eq!(p.locate(&[Key("b"), Key("d")]), None);
        assert_eq!(p.key_at(15).as_deref(), Some("b.c"));
    }
}
