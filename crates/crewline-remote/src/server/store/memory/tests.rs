//! The in-memory store runs the whole `TaskStore` contract (`crate::store_contract`); a
//! replica is a clone.

use super::*;

crate::store_contract_tests!(crate::store_contract::Memory::open());

#[tokio::test]
async fn len_and_bytes_count_what_the_store_holds() {
    let store = MemoryStore::new();
    assert!(store.is_empty());
    assert_eq!(store.bytes(), 0);
    let task = store.create("a", None, Vec::new()).await.unwrap();
    assert_eq!(store.len(), 1);
    assert_eq!(
        store.bytes(),
        task.id.len() + "a".len() + "null".len() + "[]".len()
    );
}
