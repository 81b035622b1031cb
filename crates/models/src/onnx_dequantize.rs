//! Rewriting block-quantised ONNX weights into plain fp32 initializers.
//!
//! Some registry packages ship models whose weights are int8 with one scale per block of
//! values (`DequantizeLinear` with `block_size > 0`, opset 21). ONNX Runtime's CPU kernel
//! refuses several of those (a block-quantised bias whose single block makes the scale look
//! per-tensor: "block_size must be 0 for per-tensor quantization"), so such a model loads and
//! then fails on its first run. Every such node whose inputs are all initializers computes a
//! constant; this module computes it once, stores it as an fp32 initializer under the node's
//! output name, and removes the node.
//!
//! The model is edited at the protobuf level with a minimal reader that keeps every field as
//! the bytes it was read from: only the graph's `node`, `initializer` and `input` lists are
//! touched, everything else (metadata, value_info, opsets, fields newer than this code) is
//! copied verbatim. A full message decoder (prost and hand-written structs) would silently drop
//! the fields it does not model.
//!
//! While the graph is open, names nothing reads are also tidied, because ONNX Runtime would
//! otherwise make them the caller's problem: a graph input that no node reads is still a
//! *required* input (the SFace export lists its pre-quantisation weights as inputs, so a
//! session demands 29 tensors besides the image), and an initializer also listed as a graph
//! input is treated as overridable, which blocks constant folding. Initializers no node reads
//! are dropped too (the quantiser left their reshape shapes behind).

use std::collections::{HashMap, HashSet};

/// ONNX `TensorProto.DataType` values this module reads or writes.
mod data_type {
    pub const FLOAT: i32 = 1;
    pub const UINT8: i32 = 2;
    pub const INT8: i32 = 3;
    pub const UINT16: i32 = 4;
    pub const INT16: i32 = 5;
    pub const INT32: i32 = 6;
}

/// Field numbers from onnx.proto3 (ONNX 1.17), for the messages this module looks into.
mod field {
    pub const MODEL_IR_VERSION: u32 = 1;
    pub const MODEL_GRAPH: u32 = 7;

    pub const GRAPH_NODE: u32 = 1;
    pub const GRAPH_INITIALIZER: u32 = 5;
    pub const GRAPH_INPUT: u32 = 11;
    pub const GRAPH_OUTPUT: u32 = 12;

    pub const NODE_INPUT: u32 = 1;
    pub const NODE_OUTPUT: u32 = 2;
    pub const NODE_NAME: u32 = 3;
    pub const NODE_OP_TYPE: u32 = 4;
    pub const NODE_ATTRIBUTE: u32 = 5;
    pub const NODE_DOMAIN: u32 = 7;

    pub const ATTRIBUTE_NAME: u32 = 1;
    pub const ATTRIBUTE_I: u32 = 3;
    pub const ATTRIBUTE_G: u32 = 6;
    pub const ATTRIBUTE_GRAPHS: u32 = 11;

    pub const TENSOR_DIMS: u32 = 1;
    pub const TENSOR_DATA_TYPE: u32 = 2;
    pub const TENSOR_FLOAT_DATA: u32 = 4;
    pub const TENSOR_INT32_DATA: u32 = 5;
    pub const TENSOR_NAME: u32 = 8;
    pub const TENSOR_RAW_DATA: u32 = 9;
    pub const TENSOR_DATA_LOCATION: u32 = 14;

    pub const VALUE_INFO_NAME: u32 = 1;
}

/// Initializers may be left out of the graph inputs from IR version 4 on; before it every
/// initializer had to be listed there, so older models keep their input list as it is.
const IR_VERSION_INITIALIZERS_OUTSIDE_INPUTS: u64 = 4;

#[derive(Debug, thiserror::Error)]
pub enum OnnxRewriteError {
    #[error("malformed ONNX protobuf in {message} at byte {offset}: {reason}")]
    Malformed {
        message: &'static str,
        offset: usize,
        reason: String,
    },

    #[error("the ONNX model has no graph")]
    NoGraph,

    #[error("the ONNX model has {count} graph fields; expected one")]
    SeveralGraphs { count: usize },

    #[error(
        "node `{node}` ({op_type}) has a subgraph; rewriting models with control flow (If, Loop, \
         Scan) is not supported"
    )]
    Subgraph { node: String, op_type: String },

    #[error("DequantizeLinear node `{node}` cannot be folded: {reason}")]
    Unsupported { node: String, reason: String },
}

/// What a rewrite changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DequantizeReport {
    /// Block-quantised `DequantizeLinear` nodes replaced by fp32 initializers.
    pub folded_nodes: usize,
    /// Initializers dropped because no node reads them any more (or never did).
    pub dropped_initializers: usize,
    /// Graph inputs dropped because no node reads them.
    pub dropped_unread_inputs: Vec<String>,
    /// Initializers taken off the graph input list (they stay initializers).
    pub unlisted_initializer_inputs: usize,
}

/// Folds every block-quantised `DequantizeLinear` whose inputs are initializers of the main
/// graph into an fp32 initializer, tidies unread names (see the module comment), and returns
/// the new model bytes. A model with nothing to fold comes back with only the tidying done.
pub fn fold_block_dequantize(
    model: &[u8],
) -> Result<(Vec<u8>, DequantizeReport), OnnxRewriteError> {
    let model_fields = parse_message(model, "ModelProto")?;
    let graphs: Vec<&Field<'_>> = model_fields
        .iter()
        .filter(|field| field.number == field::MODEL_GRAPH)
        .collect();
    let graph_bytes = match graphs.as_slice() {
        [] => return Err(OnnxRewriteError::NoGraph),
        [graph] => graph.bytes("ModelProto.graph")?,
        _ => {
            return Err(OnnxRewriteError::SeveralGraphs {
                count: graphs.len(),
            });
        }
    };
    let ir_version = model_fields
        .iter()
        .find(|field| field.number == field::MODEL_IR_VERSION)
        .map(|field| field.varint("ModelProto.ir_version"))
        .transpose()?
        .unwrap_or(0);

    let (graph, report) = rewrite_graph(graph_bytes, ir_version)?;

    let mut out = Vec::with_capacity(model.len() + graph.len());
    for field in &model_fields {
        if field.number == field::MODEL_GRAPH {
            write_bytes_field(&mut out, field::MODEL_GRAPH, &graph);
        } else {
            out.extend_from_slice(field.encoded);
        }
    }
    Ok((out, report))
}

fn rewrite_graph(
    graph: &[u8],
    ir_version: u64,
) -> Result<(Vec<u8>, DequantizeReport), OnnxRewriteError> {
    let fields = parse_message(graph, "GraphProto")?;
    let mut nodes = Vec::new();
    let mut initializers: HashMap<&str, Tensor<'_>> = HashMap::new();
    let mut graph_outputs: HashSet<&str> = HashSet::new();
    for (index, field) in fields.iter().enumerate() {
        match field.number {
            field::GRAPH_NODE => nodes.push((index, Node::parse(field.bytes("GraphProto.node")?)?)),
            field::GRAPH_INITIALIZER => {
                let tensor = Tensor::parse(field.bytes("GraphProto.initializer")?)?;
                initializers.insert(tensor.name, tensor);
            }
            field::GRAPH_OUTPUT => {
                graph_outputs.insert(value_info_name(field.bytes("GraphProto.output")?)?);
            }
            _ => {}
        }
    }
    if let Some((_, node)) = nodes.iter().find(|(_, node)| node.has_subgraph) {
        return Err(OnnxRewriteError::Subgraph {
            node: node.name.to_string(),
            op_type: node.op_type.to_string(),
        });
    }

    let mut report = DequantizeReport::default();
    let mut folded_nodes: HashSet<usize> = HashSet::new();
    let mut new_initializers: Vec<Vec<u8>> = Vec::new();
    let mut new_names: HashSet<&str> = HashSet::new();
    for (index, node) in &nodes {
        let Some(values) = fold_node(node, &initializers)? else {
            continue;
        };
        let output = node.outputs[0];
        let dims = &initializers[node.inputs[0]].dims;
        new_initializers.push(encode_float_tensor(output, dims, &values));
        new_names.insert(output);
        folded_nodes.insert(*index);
        report.folded_nodes += 1;
    }

    // Names the remaining graph reads; an initializer or input outside it is dead.
    let read: HashSet<&str> = nodes
        .iter()
        .filter(|(index, _)| !folded_nodes.contains(index))
        .flat_map(|(_, node)| node.inputs.iter().copied())
        .chain(graph_outputs.iter().copied())
        .collect();
    let drop_listed_initializers = ir_version >= IR_VERSION_INITIALIZERS_OUTSIDE_INPUTS;

    let mut out = Vec::with_capacity(graph.len());
    for (index, field) in fields.iter().enumerate() {
        let keep = match field.number {
            field::GRAPH_NODE => !folded_nodes.contains(&index),
            field::GRAPH_INITIALIZER => {
                let name = Tensor::parse(field.bytes("GraphProto.initializer")?)?.name;
                let keep = read.contains(name);
                if !keep {
                    report.dropped_initializers += 1;
                }
                keep
            }
            field::GRAPH_INPUT => {
                let name = value_info_name(field.bytes("GraphProto.input")?)?;
                let is_initializer = initializers.contains_key(name) || new_names.contains(name);
                if !read.contains(name) {
                    if !is_initializer {
                        report.dropped_unread_inputs.push(name.to_string());
                    }
                    false
                } else if is_initializer && drop_listed_initializers {
                    report.unlisted_initializer_inputs += 1;
                    false
                } else {
                    true
                }
            }
            _ => true,
        };
        if keep {
            out.extend_from_slice(field.encoded);
        }
    }
    for tensor in &new_initializers {
        write_bytes_field(&mut out, field::GRAPH_INITIALIZER, tensor);
    }
    Ok((out, report))
}

/// The fp32 values of a foldable block-quantised `DequantizeLinear`; `None` for any other node.
fn fold_node(
    node: &Node<'_>,
    initializers: &HashMap<&str, Tensor<'_>>,
) -> Result<Option<Vec<f32>>, OnnxRewriteError> {
    if node.op_type != "DequantizeLinear" || !matches!(node.domain, "" | "ai.onnx") {
        return Ok(None);
    }
    let block_size = node.int_attribute("block_size").unwrap_or(0);
    if block_size <= 0 {
        return Ok(None);
    }
    let unsupported = |reason: String| OnnxRewriteError::Unsupported {
        node: node.name.to_string(),
        reason,
    };
    // Inputs: x, x_scale, optional x_zero_point (an empty name means "absent").
    let inputs: Vec<&str> = node
        .inputs
        .iter()
        .copied()
        .filter(|name| !name.is_empty())
        .collect();
    if !(2..=3).contains(&inputs.len()) || node.inputs.len() > 3 || node.outputs.len() != 1 {
        return Err(unsupported(format!(
            "it has inputs {:?} and outputs {:?}; expected x, x_scale[, x_zero_point] and one \
             output",
            node.inputs, node.outputs
        )));
    }
    let Some(tensors) = inputs
        .iter()
        .map(|name| initializers.get(name))
        .collect::<Option<Vec<&Tensor<'_>>>>()
    else {
        // A runtime input is quantised: the node is not a constant, leave it to the runtime.
        return Ok(None);
    };
    if let Some(output_dtype) = node.int_attribute("output_dtype")
        && output_dtype != 0
        && output_dtype != i64::from(data_type::FLOAT)
    {
        return Err(unsupported(format!(
            "output_dtype {output_dtype} is not float32"
        )));
    }
    let axis = node.int_attribute("axis").unwrap_or(1);
    let block = BlockLayout::new(&tensors[0].dims, &tensors[1].dims, axis, block_size)
        .map_err(unsupported)?;
    let quantised = tensors[0]
        .integers()
        .map_err(|reason| unsupported(format!("x: {reason}")))?;
    let scales = tensors[1]
        .floats()
        .map_err(|reason| unsupported(format!("x_scale: {reason}")))?;
    let zero_points = match tensors.get(2) {
        Some(zero_point) => {
            if zero_point.data_type != tensors[0].data_type || zero_point.dims != tensors[1].dims {
                return Err(unsupported(format!(
                    "x_zero_point has type {} and shape {:?}; it must match x's type {} and \
                     x_scale's shape {:?}",
                    zero_point.data_type, zero_point.dims, tensors[0].data_type, tensors[1].dims
                )));
            }
            Some(
                zero_point
                    .integers()
                    .map_err(|reason| unsupported(format!("x_zero_point: {reason}")))?,
            )
        }
        None => None,
    };
    Ok(Some(block.dequantize(
        &quantised,
        &scales,
        zero_points.as_deref(),
    )))
}

/// How a block-quantised tensor maps each value to its scale: `x` seen as
/// `[outer, length, inner]` around `axis`, and `x_scale` as `[outer, blocks, inner]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BlockLayout {
    outer: usize,
    length: usize,
    inner: usize,
    block_size: usize,
    blocks: usize,
}

impl BlockLayout {
    fn new(x_dims: &[i64], scale_dims: &[i64], axis: i64, block_size: i64) -> Result<Self, String> {
        let rank = x_dims.len() as i64;
        if rank == 0 {
            return Err("x is a scalar; blocked quantisation needs at least one axis".to_string());
        }
        if !(-rank..rank).contains(&axis) {
            return Err(format!("axis {axis} is outside x's rank {rank}"));
        }
        let axis = axis.rem_euclid(rank) as usize;
        if x_dims.iter().any(|&dim| dim < 0) {
            return Err(format!("x has a negative dimension: {x_dims:?}"));
        }
        let dims: Vec<usize> = x_dims.iter().map(|&dim| dim as usize).collect();
        let block_size = block_size as usize;
        let blocks = dims[axis].div_ceil(block_size);
        let mut expected: Vec<i64> = x_dims.to_vec();
        expected[axis] = blocks as i64;
        if scale_dims != expected {
            return Err(format!(
                "x has shape {x_dims:?}, block_size {block_size} along axis {axis}, so x_scale \
                 must have shape {expected:?}, not {scale_dims:?}"
            ));
        }
        Ok(Self {
            outer: dims[..axis].iter().product(),
            length: dims[axis],
            inner: dims[axis + 1..].iter().product(),
            block_size,
            blocks,
        })
    }

    fn values(&self) -> usize {
        self.outer * self.length * self.inner
    }

    /// `y = (x - zero_point[block]) * scale[block]`, computed as ONNX Runtime's kernel does
    /// (integer difference, then one float multiply), so the folded graph matches the original.
    fn dequantize(
        &self,
        quantised: &[i32],
        scales: &[f32],
        zero_points: Option<&[i32]>,
    ) -> Vec<f32> {
        debug_assert_eq!(quantised.len(), self.values());
        let mut values = Vec::with_capacity(self.values());
        for outer in 0..self.outer {
            for position in 0..self.length {
                let block_row = (outer * self.blocks + position / self.block_size) * self.inner;
                let value_row = (outer * self.length + position) * self.inner;
                for inner in 0..self.inner {
                    let scale_index = block_row + inner;
                    let zero_point = zero_points.map_or(0, |points| points[scale_index]);
                    let difference = quantised[value_row + inner] - zero_point;
                    values.push(difference as f32 * scales[scale_index]);
                }
            }
        }
        values
    }
}

/// One field of a protobuf message, with the bytes it was encoded as (key included).
#[derive(Debug, Clone, Copy)]
struct Field<'a> {
    number: u32,
    value: Value<'a>,
    encoded: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    Varint(u64),
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Field<'a> {
    fn bytes(&self, what: &'static str) -> Result<&'a [u8], OnnxRewriteError> {
        match self.value {
            Value::Bytes(bytes) => Ok(bytes),
            _ => Err(self.wrong_type(what, "length-delimited")),
        }
    }

    fn varint(&self, what: &'static str) -> Result<u64, OnnxRewriteError> {
        match self.value {
            Value::Varint(value) => Ok(value),
            _ => Err(self.wrong_type(what, "varint")),
        }
    }

    fn string(&self, what: &'static str) -> Result<&'a str, OnnxRewriteError> {
        std::str::from_utf8(self.bytes(what)?).map_err(|error| OnnxRewriteError::Malformed {
            message: what,
            offset: 0,
            reason: format!("not UTF-8: {error}"),
        })
    }

    fn wrong_type(&self, what: &'static str, expected: &str) -> OnnxRewriteError {
        OnnxRewriteError::Malformed {
            message: what,
            offset: 0,
            reason: format!("field {} is not {expected}: {:?}", self.number, self.value),
        }
    }
}

fn parse_message<'a>(
    bytes: &'a [u8],
    message: &'static str,
) -> Result<Vec<Field<'a>>, OnnxRewriteError> {
    let mut fields = Vec::new();
    let mut position = 0;
    while position < bytes.len() {
        let start = position;
        let malformed = |offset: usize, reason: String| OnnxRewriteError::Malformed {
            message,
            offset,
            reason,
        };
        let key = read_varint(bytes, &mut position).map_err(|reason| malformed(start, reason))?;
        let number = u32::try_from(key >> 3)
            .map_err(|_| malformed(start, format!("field number {} too large", key >> 3)))?;
        if number == 0 {
            return Err(malformed(start, "field number 0".to_string()));
        }
        let value = match key & 7 {
            0 => Value::Varint(
                read_varint(bytes, &mut position).map_err(|reason| malformed(start, reason))?,
            ),
            1 => {
                take(bytes, &mut position, 8).map_err(|reason| malformed(start, reason))?;
                Value::Fixed64
            }
            2 => {
                let length =
                    read_varint(bytes, &mut position).map_err(|reason| malformed(start, reason))?;
                let length = usize::try_from(length)
                    .map_err(|_| malformed(start, format!("length {length} too large")))?;
                Value::Bytes(
                    take(bytes, &mut position, length)
                        .map_err(|reason| malformed(start, reason))?,
                )
            }
            5 => {
                let raw =
                    take(bytes, &mut position, 4).map_err(|reason| malformed(start, reason))?;
                Value::Fixed32(u32::from_le_bytes(raw.try_into().expect("4 bytes")))
            }
            wire => {
                return Err(malformed(
                    start,
                    format!("unsupported wire type {wire} (groups are not used by ONNX)"),
                ));
            }
        };
        fields.push(Field {
            number,
            value,
            encoded: &bytes[start..position],
        });
    }
    Ok(fields)
}

fn read_varint(bytes: &[u8], position: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let Some(&byte) = bytes.get(*position) else {
            return Err("truncated varint".to_string());
        };
        *position += 1;
        if shift == 63 && byte > 1 {
            return Err("varint overflows 64 bits".to_string());
        }
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes".to_string())
}

fn take<'a>(bytes: &'a [u8], position: &mut usize, length: usize) -> Result<&'a [u8], String> {
    let end = position
        .checked_add(length)
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| format!("{length} bytes announced, {} left", bytes.len() - *position))?;
    let slice = &bytes[*position..end];
    *position = end;
    Ok(slice)
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn write_bytes_field(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    write_varint(out, (u64::from(number) << 3) | 2);
    write_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

fn write_varint_field(out: &mut Vec<u8>, number: u32, value: u64) {
    write_varint(out, u64::from(number) << 3);
    write_varint(out, value);
}

/// A `TensorProto` with `dims`, `data_type`, `name` and fp32 `raw_data` (little-endian).
fn encode_float_tensor(name: &str, dims: &[i64], values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 4 + name.len() + 32);
    let mut packed_dims = Vec::new();
    for &dim in dims {
        write_varint(&mut packed_dims, dim as u64);
    }
    write_bytes_field(&mut out, field::TENSOR_DIMS, &packed_dims);
    write_varint_field(&mut out, field::TENSOR_DATA_TYPE, data_type::FLOAT as u64);
    write_bytes_field(&mut out, field::TENSOR_NAME, name.as_bytes());
    let raw: Vec<u8> = values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect();
    write_bytes_field(&mut out, field::TENSOR_RAW_DATA, &raw);
    out
}

fn value_info_name(bytes: &[u8]) -> Result<&str, OnnxRewriteError> {
    let fields = parse_message(bytes, "ValueInfoProto")?;
    match fields
        .iter()
        .find(|field| field.number == field::VALUE_INFO_NAME)
    {
        Some(field) => field.string("ValueInfoProto.name"),
        None => Ok(""),
    }
}

/// The parts of a `NodeProto` the rewrite decides on.
#[derive(Debug)]
struct Node<'a> {
    name: &'a str,
    op_type: &'a str,
    domain: &'a str,
    inputs: Vec<&'a str>,
    outputs: Vec<&'a str>,
    /// `(name, i)` of every attribute that has an integer value.
    int_attributes: Vec<(&'a str, i64)>,
    has_subgraph: bool,
}

impl<'a> Node<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Self, OnnxRewriteError> {
        let mut node = Node {
            name: "",
            op_type: "",
            domain: "",
            inputs: Vec::new(),
            outputs: Vec::new(),
            int_attributes: Vec::new(),
            has_subgraph: false,
        };
        for field in parse_message(bytes, "NodeProto")? {
            match field.number {
                field::NODE_INPUT => node.inputs.push(field.string("NodeProto.input")?),
                field::NODE_OUTPUT => node.outputs.push(field.string("NodeProto.output")?),
                field::NODE_NAME => node.name = field.string("NodeProto.name")?,
                field::NODE_OP_TYPE => node.op_type = field.string("NodeProto.op_type")?,
                field::NODE_DOMAIN => node.domain = field.string("NodeProto.domain")?,
                field::NODE_ATTRIBUTE => {
                    let mut name = "";
                    let mut integer = None;
                    for attribute in
                        parse_message(field.bytes("NodeProto.attribute")?, "AttributeProto")?
                    {
                        match attribute.number {
                            field::ATTRIBUTE_NAME => {
                                name = attribute.string("AttributeProto.name")?
                            }
                            // int64 on the wire: negative values are ten-byte two's complement.
                            field::ATTRIBUTE_I => {
                                integer = Some(attribute.varint("AttributeProto.i")? as i64)
                            }
                            field::ATTRIBUTE_G | field::ATTRIBUTE_GRAPHS => {
                                node.has_subgraph = true
                            }
                            _ => {}
                        }
                    }
                    if let Some(value) = integer {
                        node.int_attributes.push((name, value));
                    }
                }
                _ => {}
            }
        }
        Ok(node)
    }

    fn int_attribute(&self, name: &str) -> Option<i64> {
        self.int_attributes
            .iter()
            .rev()
            .find(|(attribute, _)| *attribute == name)
            .map(|&(_, value)| value)
    }
}

/// The parts of a `TensorProto` needed to read a constant.
#[derive(Debug)]
struct Tensor<'a> {
    name: &'a str,
    dims: Vec<i64>,
    data_type: i32,
    raw_data: Option<&'a [u8]>,
    /// `float_data` / `int32_data` fields, packed or not, in order.
    typed_fields: Vec<Field<'a>>,
    external: bool,
}

impl<'a> Tensor<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Self, OnnxRewriteError> {
        let mut tensor = Tensor {
            name: "",
            dims: Vec::new(),
            data_type: 0,
            raw_data: None,
            typed_fields: Vec::new(),
            external: false,
        };
        for field in parse_message(bytes, "TensorProto")? {
            match (field.number, field.value) {
                (field::TENSOR_DIMS, Value::Varint(dim)) => tensor.dims.push(dim as i64),
                (field::TENSOR_DIMS, Value::Bytes(packed)) => {
                    let mut position = 0;
                    while position < packed.len() {
                        let dim = read_varint(packed, &mut position).map_err(|reason| {
                            OnnxRewriteError::Malformed {
                                message: "TensorProto.dims",
                                offset: position,
                                reason,
                            }
                        })?;
                        tensor.dims.push(dim as i64);
                    }
                }
                (field::TENSOR_DATA_TYPE, _) => {
                    tensor.data_type = field.varint("TensorProto.data_type")? as i32
                }
                (field::TENSOR_NAME, _) => tensor.name = field.string("TensorProto.name")?,
                (field::TENSOR_RAW_DATA, _) => {
                    tensor.raw_data = Some(field.bytes("TensorProto.raw_data")?)
                }
                (field::TENSOR_FLOAT_DATA | field::TENSOR_INT32_DATA, _) => {
                    tensor.typed_fields.push(field)
                }
                (field::TENSOR_DATA_LOCATION, _) => {
                    tensor.external = field.varint("TensorProto.data_location")? == 1
                }
                _ => {}
            }
        }
        Ok(tensor)
    }

    fn element_count(&self) -> usize {
        self.dims.iter().map(|&dim| dim.max(0) as usize).product()
    }

    fn check_count(&self, count: usize) -> Result<(), String> {
        if count == self.element_count() {
            Ok(())
        } else {
            Err(format!(
                "`{}` has shape {:?} but {count} values",
                self.name, self.dims
            ))
        }
    }

    /// Integer values of an 8-, 16- or 32-bit integer tensor.
    fn integers(&self) -> Result<Vec<i32>, String> {
        if self.external {
            return Err(format!("`{}` is stored in an external file", self.name));
        }
        let values: Vec<i32> = match (self.data_type, self.raw_data) {
            (data_type::INT8, Some(raw)) => raw.iter().map(|&byte| i32::from(byte as i8)).collect(),
            (data_type::UINT8, Some(raw)) => raw.iter().map(|&byte| i32::from(byte)).collect(),
            (data_type::INT16, Some(raw)) => raw
                .chunks_exact(2)
                .map(|pair| i32::from(i16::from_le_bytes([pair[0], pair[1]])))
                .collect(),
            (data_type::UINT16, Some(raw)) => raw
                .chunks_exact(2)
                .map(|pair| i32::from(u16::from_le_bytes([pair[0], pair[1]])))
                .collect(),
            (data_type::INT32, Some(raw)) => raw
                .chunks_exact(4)
                .map(|word| i32::from_le_bytes(word.try_into().expect("4 bytes")))
                .collect(),
            // Without raw_data, all of these live in int32_data as (sign-extended) varints.
            (
                data_type::INT8
                | data_type::UINT8
                | data_type::INT16
                | data_type::UINT16
                | data_type::INT32,
                None,
            ) => {
                let mut values = Vec::new();
                for field in &self.typed_fields {
                    match field.value {
                        Value::Varint(value) => values.push(value as i64 as i32),
                        Value::Bytes(packed) => {
                            let mut position = 0;
                            while position < packed.len() {
                                values.push(read_varint(packed, &mut position)? as i64 as i32);
                            }
                        }
                        _ => {
                            return Err(format!(
                                "`{}` has int32_data of the wrong wire type",
                                self.name
                            ));
                        }
                    }
                }
                values
            }
            (other, _) => {
                return Err(format!(
                    "`{}` has data type {other}; expected an 8-, 16- or 32-bit integer",
                    self.name
                ));
            }
        };
        self.check_count(values.len())?;
        Ok(values)
    }

    /// Values of a float32 tensor.
    fn floats(&self) -> Result<Vec<f32>, String> {
        if self.external {
            return Err(format!("`{}` is stored in an external file", self.name));
        }
        if self.data_type != data_type::FLOAT {
            return Err(format!(
                "`{}` has data type {}; only float32 scales are supported",
                self.name, self.data_type
            ));
        }
        let values: Vec<f32> = match self.raw_data {
            Some(raw) => raw
                .chunks_exact(4)
                .map(|word| f32::from_le_bytes(word.try_into().expect("4 bytes")))
                .collect(),
            None => {
                let mut values = Vec::new();
                for field in &self.typed_fields {
                    match field.value {
                        Value::Fixed32(bits) => values.push(f32::from_bits(bits)),
                        Value::Bytes(packed) if packed.len() % 4 == 0 => values.extend(
                            packed
                                .chunks_exact(4)
                                .map(|word| f32::from_le_bytes(word.try_into().expect("4 bytes"))),
                        ),
                        _ => {
                            return Err(format!(
                                "`{}` has float_data of the wrong wire type",
                                self.name
                            ));
                        }
                    }
                }
                values
            }
        };
        self.check_count(values.len())?;
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string_field(out: &mut Vec<u8>, number: u32, value: &str) {
        write_bytes_field(out, number, value.as_bytes());
    }

    fn int_attribute(name: &str, value: i64) -> Vec<u8> {
        let mut attribute = Vec::new();
        string_field(&mut attribute, field::ATTRIBUTE_NAME, name);
        write_varint_field(&mut attribute, field::ATTRIBUTE_I, value as u64);
        write_varint_field(&mut attribute, 20, 2); // type = INT
        attribute
    }

    fn node(op_type: &str, inputs: &[&str], outputs: &[&str], attributes: &[Vec<u8>]) -> Vec<u8> {
        let mut node = Vec::new();
        for input in inputs {
            string_field(&mut node, field::NODE_INPUT, input);
        }
        for output in outputs {
            string_field(&mut node, field::NODE_OUTPUT, output);
        }
        string_field(&mut node, field::NODE_NAME, &format!("{}_node", outputs[0]));
        string_field(&mut node, field::NODE_OP_TYPE, op_type);
        for attribute in attributes {
            write_bytes_field(&mut node, field::NODE_ATTRIBUTE, attribute);
        }
        node
    }

    fn raw_tensor(name: &str, dims: &[i64], data_type: i32, raw: &[u8]) -> Vec<u8> {
        let mut tensor = Vec::new();
        // Unpacked dims, as some writers emit them.
        for &dim in dims {
            write_varint_field(&mut tensor, field::TENSOR_DIMS, dim as u64);
        }
        write_varint_field(&mut tensor, field::TENSOR_DATA_TYPE, data_type as u64);
        string_field(&mut tensor, field::TENSOR_NAME, name);
        write_bytes_field(&mut tensor, field::TENSOR_RAW_DATA, raw);
        tensor
    }

    fn value_info(name: &str) -> Vec<u8> {
        let mut info = Vec::new();
        string_field(&mut info, field::VALUE_INFO_NAME, name);
        info
    }

    /// A graph `y = Conv(data, DequantizeLinear(w_q, w_s, w_zp))` with a 2x5 int8 weight in
    /// blocks of 2 along axis 1 (3 blocks per row, the last one short), plus an input no node
    /// reads and an initializer listed as an input.
    fn tiny_model(ir_version: u64) -> (Vec<u8>, Vec<f32>) {
        let quantised: [i8; 10] = [-128, -1, 0, 1, 127, 10, 20, 30, 40, 50];
        let scales: [f32; 6] = [0.5, 0.25, 2.0, 0.1, 1.0, -3.0];
        let zero_points: [i8; 6] = [0, -1, 3, 10, 0, 50];
        let expected: Vec<f32> = quantised
            .iter()
            .enumerate()
            .map(|(index, &q)| {
                let (row, column) = (index / 5, index % 5);
                let block = row * 3 + column / 2;
                (i32::from(q) - i32::from(zero_points[block])) as f32 * scales[block]
            })
            .collect();
        let mut graph = Vec::new();
        write_bytes_field(
            &mut graph,
            field::GRAPH_NODE,
            &node(
                "DequantizeLinear",
                &["w_q", "w_s", "w_zp"],
                &["w"],
                &[int_attribute("axis", 1), int_attribute("block_size", 2)],
            ),
        );
        write_bytes_field(
            &mut graph,
            field::GRAPH_NODE,
            &node("Conv", &["data", "w", "bias"], &["y"], &[]),
        );
        string_field(&mut graph, 2, "tiny");
        let raw_q: Vec<u8> = quantised.iter().map(|&q| q as u8).collect();
        write_bytes_field(
            &mut graph,
            field::GRAPH_INITIALIZER,
            &raw_tensor("w_q", &[2, 5], data_type::INT8, &raw_q),
        );
        let raw_s: Vec<u8> = scales.iter().flat_map(|s| s.to_le_bytes()).collect();
        write_bytes_field(
            &mut graph,
            field::GRAPH_INITIALIZER,
            &raw_tensor("w_s", &[2, 3], data_type::FLOAT, &raw_s),
        );
        let raw_zp: Vec<u8> = zero_points.iter().map(|&z| z as u8).collect();
        write_bytes_field(
            &mut graph,
            field::GRAPH_INITIALIZER,
            &raw_tensor("w_zp", &[2, 3], data_type::INT8, &raw_zp),
        );
        write_bytes_field(
            &mut graph,
            field::GRAPH_INITIALIZER,
            &raw_tensor("bias", &[2], data_type::FLOAT, &[0; 8]),
        );
        write_bytes_field(
            &mut graph,
            field::GRAPH_INITIALIZER,
            &raw_tensor("stale", &[1], data_type::FLOAT, &[0; 4]),
        );
        for input in ["data", "old_weight", "bias"] {
            write_bytes_field(&mut graph, field::GRAPH_INPUT, &value_info(input));
        }
        write_bytes_field(&mut graph, field::GRAPH_OUTPUT, &value_info("y"));
        // A field this code has never heard of must survive.
        write_bytes_field(&mut graph, 99, b"future graph field");

        let mut model = Vec::new();
        write_varint_field(&mut model, field::MODEL_IR_VERSION, ir_version);
        string_field(&mut model, 2, "producer");
        write_bytes_field(&mut model, field::MODEL_GRAPH, &graph);
        write_bytes_field(&mut model, 14, b"metadata we do not model");
        (model, expected)
    }

    fn graph_of(model: &[u8]) -> Vec<Field<'_>> {
        let fields = parse_message(model, "ModelProto").unwrap();
        let graph = fields
            .iter()
            .find(|field| field.number == field::MODEL_GRAPH)
            .unwrap();
        parse_message(graph.bytes("graph").unwrap(), "GraphProto").unwrap()
    }

    #[test]
    fn blocked_weight_becomes_an_fp32_initializer() {
        let (model, expected) = tiny_model(6);
        let (rewritten, report) = fold_block_dequantize(&model).unwrap();
        assert_eq!(
            report,
            DequantizeReport {
                folded_nodes: 1,
                dropped_initializers: 4,
                dropped_unread_inputs: vec!["old_weight".to_string()],
                unlisted_initializer_inputs: 1,
            }
        );
        let graph = graph_of(&rewritten);
        let nodes: Vec<Node<'_>> = graph
            .iter()
            .filter(|f| f.number == field::GRAPH_NODE)
            .map(|f| Node::parse(f.bytes("n").unwrap()).unwrap())
            .collect();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].op_type, "Conv");
        let tensors: Vec<Tensor<'_>> = graph
            .iter()
            .filter(|f| f.number == field::GRAPH_INITIALIZER)
            .map(|f| Tensor::parse(f.bytes("t").unwrap()).unwrap())
            .collect();
        let names: Vec<&str> = tensors.iter().map(|tensor| tensor.name).collect();
        assert_eq!(names, ["bias", "w"]);
        let weight = &tensors[1];
        assert_eq!(
            (weight.dims.as_slice(), weight.data_type),
            (&[2i64, 5][..], data_type::FLOAT)
        );
        assert_eq!(weight.floats().unwrap(), expected);
        assert_eq!(
            expected[..5],
            [-64.0, -0.5, 0.25, 0.5, 248.0],
            "hand-checked first row"
        );
        let inputs: Vec<&str> = graph
            .iter()
            .filter(|f| f.number == field::GRAPH_INPUT)
            .map(|f| value_info_name(f.bytes("i").unwrap()).unwrap())
            .collect();
        assert_eq!(inputs, ["data"]);
        assert!(
            graph
                .iter()
                .any(|f| f.number == 99 && f.bytes("x").unwrap() == b"future graph field")
        );
        // Fields outside the graph are the original bytes, in the original order.
        let model_fields = parse_message(&rewritten, "ModelProto").unwrap();
        let numbers: Vec<u32> = model_fields.iter().map(|field| field.number).collect();
        assert_eq!(numbers, [1, 2, field::MODEL_GRAPH, 14]);
        assert_eq!(
            model_fields[3].encoded,
            parse_message(&model, "m").unwrap()[3].encoded
        );
        // A second pass finds nothing left to do and changes nothing.
        let (again, report) = fold_block_dequantize(&rewritten).unwrap();
        assert_eq!(report, DequantizeReport::default());
        assert_eq!(again, rewritten);
    }

    #[test]
    fn old_ir_versions_keep_initializers_listed_as_inputs() {
        let (model, _) = tiny_model(3);
        let (rewritten, report) = fold_block_dequantize(&model).unwrap();
        assert_eq!(report.unlisted_initializer_inputs, 0);
        let inputs: Vec<&str> = graph_of(&rewritten)
            .iter()
            .filter(|f| f.number == field::GRAPH_INPUT)
            .map(|f| value_info_name(f.bytes("i").unwrap()).unwrap())
            .collect();
        assert_eq!(inputs, ["data", "bias"]);
    }

    #[test]
    fn block_layout_checks_the_scale_shape() {
        let layout = BlockLayout::new(&[4, 3, 5], &[4, 2, 5], -2, 2).unwrap();
        assert_eq!(
            (layout.outer, layout.length, layout.inner, layout.blocks),
            (4, 3, 5, 2)
        );
        let error = BlockLayout::new(&[10, 9], &[10, 2], 1, 9).unwrap_err();
        assert!(error.contains("[10, 1]"), "{error}");
        assert!(
            BlockLayout::new(&[10, 9], &[10, 1], 2, 9)
                .unwrap_err()
                .contains("axis 2")
        );
    }

    #[test]
    fn typed_fields_are_read_like_raw_data() {
        let mut tensor = Vec::new();
        write_bytes_field(&mut tensor, field::TENSOR_DIMS, &[3]);
        write_varint_field(&mut tensor, field::TENSOR_DATA_TYPE, data_type::INT8 as u64);
        let mut packed = Vec::new();
        for value in [-5i64, 0, 7] {
            write_varint(&mut packed, value as u64);
        }
        write_bytes_field(&mut tensor, field::TENSOR_INT32_DATA, &packed);
        assert_eq!(
            Tensor::parse(&tensor).unwrap().integers().unwrap(),
            [-5, 0, 7]
        );

        let mut floats = Vec::new();
        write_bytes_field(&mut floats, field::TENSOR_DIMS, &[2]);
        write_varint_field(
            &mut floats,
            field::TENSOR_DATA_TYPE,
            data_type::FLOAT as u64,
        );
        for value in [1.5f32, -2.0] {
            write_varint(&mut floats, (u64::from(field::TENSOR_FLOAT_DATA) << 3) | 5);
            floats.extend_from_slice(&value.to_le_bytes());
        }
        assert_eq!(
            Tensor::parse(&floats).unwrap().floats().unwrap(),
            [1.5, -2.0]
        );
    }

    #[test]
    fn malformed_bytes_are_reported_with_their_offset() {
        // Field 7, length-delimited, announcing 200 bytes of which 2 follow.
        let error = fold_block_dequantize(&[0x3a, 0xc8, 0x01, 0x08, 0x01]).unwrap_err();
        assert!(
            matches!(error, OnnxRewriteError::Malformed { offset: 0, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("200 bytes announced"), "{error}");
        let error = fold_block_dequantize(&[0x08, 0x06]).unwrap_err();
        assert!(matches!(error, OnnxRewriteError::NoGraph), "{error}");
    }

    #[test]
    fn scale_of_the_wrong_shape_names_the_node() {
        let (model, _) = tiny_model(6);
        // Re-encode with block_size 5: the scale would need shape [2, 1].
        let text = model.clone();
        let position = text
            .windows(10)
            .position(|window| window == b"block_size")
            .unwrap();
        let mut broken = model;
        // The varint value follows the name field's bytes and the key byte of field 3.
        assert_eq!(broken[position + 10], (field::ATTRIBUTE_I << 3) as u8);
        broken[position + 11] = 5;
        let error = fold_block_dequantize(&broken).unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("w_node") && message.contains("[2, 1]"),
            "{message}"
        );
    }
}
