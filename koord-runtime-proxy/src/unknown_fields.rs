//! Carries fields our CRI proto does not know (sent by a newer kubelet)
//! through the decode, merge and re-encode of an intercepted request.
//!
//! The merged message is encoded as usual and the original's unknown fields
//! are appended after it. Protobuf parsers merge a singular embedded message
//! that appears twice, so unknown fields nested in singular messages travel in
//! a skeleton of their parents' tags. Unknown fields inside repeated elements
//! or map entries cannot be put back that way (a second occurrence would be a
//! new element), so they are dropped and counted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::LazyLock;

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};

use crate::wire::{self, WireError, WireType};

/// protoc's descriptor set for `proto/cri/api.proto`, written by build.rs.
const CRI_DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cri_descriptor.bin"));

/// Deeper nesting is refused, as prost's decoder does.
const MAX_DEPTH: usize = 100;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("the CRI descriptor set does not decode: {0}")]
    Decode(String),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReattachError {
    #[error("message type {0} is not in the schema")]
    UnknownMessage(String),
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// How the walk treats a known field.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FieldShape {
    /// Scalars, strings, bytes, enums, packed lists: nothing to look into.
    Plain,
    /// A singular embedded message (including oneof members) of this type.
    Message(String),
    /// A repeated message or map entry of this type.
    RepeatedMessage(String),
}

/// Field numbers and shapes of every message in a descriptor set, keyed by
/// full name with a leading dot (`.runtime.v1.CreateContainerRequest`).
#[derive(Debug, Clone, Default)]
pub struct Schema {
    messages: HashMap<String, HashMap<u32, FieldShape>>,
    /// gRPC paths of the services' methods (`/runtime.v1.RuntimeService/Version`).
    methods: HashSet<String>,
}

static CRI_SCHEMA: LazyLock<Result<Schema, SchemaError>> =
    LazyLock::new(|| Schema::from_descriptor_set(CRI_DESCRIPTORS));

/// The unknown fields found in one request and what became of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reattached {
    /// Bytes to append to the merged message's encoding.
    pub trailer: Vec<u8>,
    /// Unknown fields carried in `trailer`.
    pub kept: usize,
    /// Unknown fields left out: inside repeated elements or map entries,
    /// or inside a message the merged request no longer has.
    pub dropped: usize,
}

/// Unknown fields of one message and of its singular sub-messages, by field number.
#[derive(Debug, Default)]
struct KeptTree {
    unknown: Vec<u8>,
    count: usize,
    children: BTreeMap<u32, KeptTree>,
}

impl KeptTree {
    fn total(&self) -> usize {
        self.count + self.children.values().map(KeptTree::total).sum::<usize>()
    }
}

impl Schema {
    /// The schema of the CRI API this proxy was built with.
    pub fn cri() -> Result<&'static Schema, &'static SchemaError> {
        CRI_SCHEMA.as_ref()
    }

    /// Reads an encoded `FileDescriptorSet`.
    pub fn from_descriptor_set(bytes: &[u8]) -> Result<Self, SchemaError> {
        let set = prost_types::FileDescriptorSet::decode(bytes)
            .map_err(|error| SchemaError::Decode(error.to_string()))?;
        let mut schema = Self::default();
        for file in &set.file {
            let scope = match file.package() {
                "" => String::new(),
                package => format!(".{package}"),
            };
            for message in &file.message_type {
                schema.add_message(&scope, message);
            }
            let package = file.package();
            for service in &file.service {
                for method in &service.method {
                    let service_name = match package {
                        "" => service.name().to_string(),
                        package => format!("{package}.{}", service.name()),
                    };
                    schema
                        .methods
                        .insert(format!("/{service_name}/{}", method.name()));
                }
            }
        }
        Ok(schema)
    }

    fn add_message(&mut self, scope: &str, message: &prost_types::DescriptorProto) {
        let name = format!("{scope}.{}", message.name());
        let mut fields = HashMap::new();
        for field in &message.field {
            let Ok(number) = u32::try_from(field.number()) else {
                continue;
            };
            let shape = match (field.r#type(), field.label()) {
                (Type::Message, Label::Repeated) => {
                    FieldShape::RepeatedMessage(field.type_name().to_string())
                }
                (Type::Message, _) => FieldShape::Message(field.type_name().to_string()),
                _ => FieldShape::Plain,
            };
            fields.insert(number, shape);
        }
        for nested in &message.nested_type {
            self.add_message(&name, nested);
        }
        self.messages.insert(name, fields);
    }

    pub fn knows(&self, message: &str) -> bool {
        self.messages.contains_key(message)
    }

    /// Whether `path` is the gRPC path of a method of the schema's services.
    pub fn knows_method(&self, path: &str) -> bool {
        self.methods.contains(path)
    }

    /// Finds the unknown fields of `original` (an encoded `message`) and
    /// builds the bytes that, appended to `merged` (the encoded merge
    /// result), hand them on. Parents `merged` no longer has are not revived.
    pub fn reattach(
        &self,
        message: &str,
        original: &[u8],
        merged: &[u8],
    ) -> Result<Reattached, ReattachError> {
        let fields = self
            .messages
            .get(message)
            .ok_or_else(|| ReattachError::UnknownMessage(message.to_string()))?;
        let mut tree = KeptTree::default();
        let mut result = Reattached::default();
        self.collect(fields, original, &mut tree, &mut result.dropped, 0)?;
        if tree.total() > 0 {
            attach(&tree, merged, &mut result, 0)?;
        }
        Ok(result)
    }

    fn fields_of(&self, message: &str) -> Result<&HashMap<u32, FieldShape>, ReattachError> {
        self.messages
            .get(message)
            .ok_or_else(|| ReattachError::UnknownMessage(message.to_string()))
    }

    fn collect(
        &self,
        fields: &HashMap<u32, FieldShape>,
        bytes: &[u8],
        tree: &mut KeptTree,
        dropped: &mut usize,
        depth: usize,
    ) -> Result<(), ReattachError> {
        if depth >= MAX_DEPTH {
            return Err(WireError::TooDeep(MAX_DEPTH).into());
        }
        for field in wire::fields(bytes) {
            let field = field?;
            match fields.get(&field.number) {
                None => {
                    tree.unknown.extend_from_slice(field.raw);
                    tree.count += 1;
                }
                Some(FieldShape::Message(name)) if field.wire_type == WireType::Len => {
                    let child = tree.children.entry(field.number).or_default();
                    self.collect(
                        self.fields_of(name)?,
                        field.value,
                        child,
                        dropped,
                        depth + 1,
                    )?;
                }
                Some(FieldShape::RepeatedMessage(name)) if field.wire_type == WireType::Len => {
                    *dropped +=
                        self.count_unknown(self.fields_of(name)?, field.value, depth + 1)?;
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Unknown fields anywhere inside one encoded message.
    fn count_unknown(
        &self,
        fields: &HashMap<u32, FieldShape>,
        bytes: &[u8],
        depth: usize,
    ) -> Result<usize, ReattachError> {
        if depth >= MAX_DEPTH {
            return Err(WireError::TooDeep(MAX_DEPTH).into());
        }
        let mut count = 0;
        for field in wire::fields(bytes) {
            let field = field?;
            match fields.get(&field.number) {
                None => count += 1,
                Some(FieldShape::Message(name) | FieldShape::RepeatedMessage(name))
                    if field.wire_type == WireType::Len =>
                {
                    count += self.count_unknown(self.fields_of(name)?, field.value, depth + 1)?;
                }
                Some(_) => {}
            }
        }
        Ok(count)
    }
}

/// Writes `tree`'s unknown fields for a message whose merged encoding is
/// `merged`; a sub-message is only written into when `merged` has it too.
fn attach(
    tree: &KeptTree,
    merged: &[u8],
    result: &mut Reattached,
    depth: usize,
) -> Result<(), WireError> {
    if depth >= MAX_DEPTH {
        return Err(WireError::TooDeep(MAX_DEPTH));
    }
    result.trailer.extend_from_slice(&tree.unknown);
    result.kept += tree.count;
    for (&number, child) in &tree.children {
        let total = child.total();
        if total == 0 {
            continue;
        }
        // All occurrences of a singular message merge into one value.
        let mut present = false;
        let mut merged_child = Vec::new();
        for field in wire::fields(merged) {
            let field = field?;
            if field.number == number && field.wire_type == WireType::Len {
                present = true;
                merged_child.extend_from_slice(field.value);
            }
        }
        if !present {
            result.dropped += total;
            continue;
        }
        let mut inner = Reattached::default();
        attach(child, &merged_child, &mut inner, depth + 1)?;
        result.kept += inner.kept;
        result.dropped += inner.dropped;
        if !inner.trailer.is_empty() {
            wire::put_len_field(&mut result.trailer, number, &inner.trailer);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::v1 as cri;
    use crate::wire::{put_len_field, put_tag, put_varint};

    fn varint_field(number: u32, value: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_tag(&mut out, number, WireType::Varint);
        put_varint(&mut out, value);
        out
    }

    fn len_field(number: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        put_len_field(&mut out, number, payload);
        out
    }

    const UPDATE: &str = ".runtime.v1.UpdateContainerResourcesRequest";

    #[test]
    fn the_cri_schema_knows_the_intercepted_requests() {
        let schema = Schema::cri().unwrap();
        for method in crate::config::CriMethod::ALL {
            let name = format!(".runtime.v1.{}Request", method.name());
            assert!(schema.knows(&name), "{name}");
        }
        let resources = &schema.messages[".runtime.v1.LinuxContainerResources"];
        // hugepage_limits (8) is repeated, unified (9) a map.
        assert!(matches!(
            resources.get(&8),
            Some(FieldShape::RepeatedMessage(_))
        ));
        assert_eq!(
            resources.get(&9),
            Some(&FieldShape::RepeatedMessage(
                ".runtime.v1.LinuxContainerResources.UnifiedEntry".into()
            ))
        );
        assert_eq!(resources.get(&1), Some(&FieldShape::Plain));
        assert!(schema.knows(".runtime.v1.LinuxContainerResources.UnifiedEntry"));
    }

    #[test]
    fn the_cri_schema_knows_the_service_methods() {
        let schema = Schema::cri().unwrap();
        for path in [
            "/runtime.v1.RuntimeService/Version",
            "/runtime.v1.RuntimeService/ListContainers",
            "/runtime.v1.ImageService/PullImage",
        ] {
            assert!(schema.knows_method(path), "{path}");
        }
        for path in [
            "/runtime.v1.RuntimeService/NoSuchCall",
            "/runtime.v1alpha2.RuntimeService/Version",
            "/x",
            "",
        ] {
            assert!(!schema.knows_method(path), "{path}");
        }
    }

    #[test]
    fn without_unknown_fields_nothing_is_appended() {
        let schema = Schema::cri().unwrap();
        let request = cri::UpdateContainerResourcesRequest {
            container_id: "c".into(),
            linux: Some(cri::LinuxContainerResources {
                cpu_shares: 2,
                unified: [("a".to_string(), "b".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = request.encode_to_vec();
        assert_eq!(
            schema.reattach(UPDATE, &bytes, &bytes),
            Ok(Reattached::default())
        );
    }

    #[test]
    fn nested_unknowns_get_a_skeleton_and_merge_back() {
        let schema = Schema::cri().unwrap();
        // linux (2) { cpu_shares (3) = 5, <unknown 77> = 1 }, <unknown 90> = "x"
        let mut linux = varint_field(3, 5);
        linux.extend(varint_field(77, 1));
        let mut original = len_field(2, &linux);
        original.extend(len_field(90, b"x"));
        original.extend(varint_field(1, 9)); // container_id would be a string: ignored.

        let merged = cri::UpdateContainerResourcesRequest {
            linux: Some(cri::LinuxContainerResources {
                cpu_shares: 1024,
                ..Default::default()
            }),
            ..Default::default()
        }
        .encode_to_vec();
        let result = schema.reattach(UPDATE, &original, &merged).unwrap();
        assert_eq!((result.kept, result.dropped), (2, 0));
        let mut expected = len_field(90, b"x");
        expected.extend(len_field(2, &varint_field(77, 1)));
        assert_eq!(result.trailer, expected);

        let mut body = merged.clone();
        body.extend(&result.trailer);
        let decoded = cri::UpdateContainerResourcesRequest::decode(body.as_slice()).unwrap();
        assert_eq!(decoded.linux.unwrap().cpu_shares, 1024);
    }

    #[test]
    fn a_parent_the_merge_removed_is_not_revived() {
        let schema = Schema::cri().unwrap();
        let original = len_field(2, &varint_field(77, 1));
        let merged = cri::UpdateContainerResourcesRequest::default().encode_to_vec();
        let result = schema.reattach(UPDATE, &original, &merged).unwrap();
        assert_eq!(result.trailer, Vec::<u8>::new());
        assert_eq!((result.kept, result.dropped), (0, 1));
    }

    #[test]
    fn unknowns_in_repeated_elements_and_map_entries_are_counted() {
        let schema = Schema::cri().unwrap();
        // linux { hugepage_limits (8) { <unknown 6> }, unified (9) { <unknown 3> } }
        let mut linux = len_field(8, &varint_field(6, 1));
        linux.extend(len_field(9, &varint_field(3, 1)));
        let original = len_field(2, &linux);
        let merged = cri::UpdateContainerResourcesRequest::decode(original.as_slice())
            .unwrap()
            .encode_to_vec();
        let result = schema.reattach(UPDATE, &original, &merged).unwrap();
        assert_eq!(result.trailer, Vec::<u8>::new());
        assert_eq!((result.kept, result.dropped), (0, 2));
    }

    #[test]
    fn malformed_input_is_an_error() {
        let schema = Schema::cri().unwrap();
        let merged = Vec::new();
        for original in [vec![0x0b], len_field(2, &[0x0e]), vec![0x12, 0x09, 1]] {
            assert!(schema.reattach(UPDATE, &original, &merged).is_err());
        }
        assert_eq!(
            schema.reattach(".x.Y", &[], &[]),
            Err(ReattachError::UnknownMessage(".x.Y".into()))
        );
    }

    /// A schema with a self-recursive message `.t.Node { Node child = 1; }`.
    fn recursive_schema() -> Schema {
        use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto};
        let node = DescriptorProto {
            name: Some("Node".into()),
            field: vec![FieldDescriptorProto {
                name: Some("child".into()),
                number: Some(1),
                label: Some(Label::Optional as i32),
                r#type: Some(Type::Message as i32),
                type_name: Some(".t.Node".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let set = prost_types::FileDescriptorSet {
            file: vec![FileDescriptorProto {
                package: Some("t".into()),
                message_type: vec![node],
                ..Default::default()
            }],
        };
        Schema::from_descriptor_set(&set.encode_to_vec()).unwrap()
    }

    #[test]
    fn nesting_is_bounded() {
        let schema = recursive_schema();
        let nest = |levels: usize| {
            let mut bytes = varint_field(5, 1);
            for _ in 0..levels {
                bytes = len_field(1, &bytes);
            }
            bytes
        };
        let shallow = nest(10);
        let result = schema.reattach(".t.Node", &shallow, &shallow).unwrap();
        assert_eq!(result.kept, 1);
        // The skeleton rebuilt around the one unknown field is the input itself.
        assert_eq!(result.trailer, shallow);
        let deep = nest(MAX_DEPTH + 5);
        assert_eq!(
            schema.reattach(".t.Node", &deep, &deep),
            Err(ReattachError::Wire(WireError::TooDeep(MAX_DEPTH)))
        );
    }
}
