//! [`Coordinator`]: what shard 0 (on rank 0) decides for the whole cluster — table ids,
//! assigned once by name, so that every process agrees on them.

use crate::{ElemType, TableMeta};
use rustc_hash::FxHashMap;

/// The cluster's table registry.
#[derive(Debug, Default)]
pub(crate) struct Coordinator {
    tables: FxHashMap<String, TableMeta>,
}

impl Coordinator {
    /// The table `name`: assigned the next id on its first declaration; a later one must
    /// have the same shape.
    pub(crate) fn declare(
        &mut self,
        name: String,
        width: usize,
        elem: ElemType,
    ) -> Result<TableMeta, String> {
        let next = self.tables.len() as u32;
        let meta = self.tables.entry(name.clone()).or_insert(TableMeta {
            id: next,
            name,
            width,
            elem,
        });
        if meta.width != width || meta.elem != elem {
            return Err(format!(
                "table '{}' declared as {} x {} by one process and {} x {} by another",
                meta.name,
                meta.width,
                meta.elem.name(),
                width,
                elem.name()
            ));
        }
        Ok(meta.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_assigned_once_by_name() {
        let mut c = Coordinator::default();
        let a = c.declare("a".into(), 2, ElemType::F32).unwrap();
        let b = c.declare("b".into(), 1, ElemType::I64).unwrap();
        assert_eq!((a.id, b.id), (0, 1));
        assert_eq!(c.declare("a".into(), 2, ElemType::F32).unwrap(), a);
        let err = c.declare("a".into(), 3, ElemType::F32).unwrap_err();
        assert!(err.contains("'a'"), "{err}");
    }
}
