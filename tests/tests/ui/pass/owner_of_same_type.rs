use handles_core::ResourceHandle;

fn drop_node(_: u64, _: &Node) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u64, accessor = id, delete = drop_node)]
struct Node {
    #[owner]
    parent: Option<NodeHandle>,
}

fn main() {
    // SAFETY: stand-in ids; the deleter does nothing.
    let root = unsafe { NodeHandle::from_raw(1, Node { parent: None }) };
    let child = unsafe { NodeHandle::from_raw(2, Node { parent: Some(root.clone()) }) };
    assert_eq!(child.parent().as_ref().map(NodeHandle::id), Some(1));
}
