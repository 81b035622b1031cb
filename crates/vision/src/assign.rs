//! Who is who: faces to roles by identity embeddings.
//!
//! [`min_cost_assignment`] is the Hungarian algorithm (shortest augmenting paths with row and
//! column potentials, O(n² m) for n <= m) on any rectangular matrix. [`match_faces_to_roles`]
//! uses it to give each role at most one face and each face at most one role, maximising the
//! total similarity of the pairs above a threshold; a role left without a face says why.
//! [`bootstrap_reference`] makes a reference embedding for a character who has no reference
//! image, from the faces on screen while that character speaks.

use serde::{Deserialize, Serialize};

use super::sface::cosine;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AssignError {
    #[error(
        "cost matrix row {row} has {found} columns, row 0 has {expected}; the matrix must be \
         rectangular"
    )]
    Ragged {
        row: usize,
        expected: usize,
        found: usize,
    },

    #[error("cost[{row}][{column}] is {value}; costs must be finite")]
    NotFinite {
        row: usize,
        column: usize,
        value: f64,
    },

    #[error(
        "{what} has {found} dimensions, the first face embedding has {expected}; all embeddings \
         must come from one model"
    )]
    DimensionMismatch {
        what: String,
        expected: usize,
        found: usize,
    },
}

/// For each row of `cost`, the column it is assigned (`None` for rows left over when there are
/// more rows than columns), minimising the total cost over all one-to-one assignments of
/// `min(rows, columns)` pairs.
pub fn min_cost_assignment(cost: &[Vec<f64>]) -> Result<Vec<Option<usize>>, AssignError> {
    let rows = cost.len();
    let columns = cost.first().map_or(0, Vec::len);
    for (row, values) in cost.iter().enumerate() {
        if values.len() != columns {
            return Err(AssignError::Ragged {
                row,
                expected: columns,
                found: values.len(),
            });
        }
        if let Some((column, &value)) = values
            .iter()
            .enumerate()
            .find(|(_, value)| !value.is_finite())
        {
            return Err(AssignError::NotFinite { row, column, value });
        }
    }
    if rows == 0 || columns == 0 {
        return Ok(vec![None; rows]);
    }
    if rows <= columns {
        return Ok(hungarian(rows, columns, |row, column| cost[row][column]));
    }
    // More rows than columns: assign every column to a row instead, then read it back.
    let by_column = hungarian(columns, rows, |column, row| cost[row][column]);
    let mut by_row = vec![None; rows];
    for (column, row) in by_column.into_iter().enumerate() {
        if let Some(row) = row {
            by_row[row] = Some(column);
        }
    }
    Ok(by_row)
}

/// Hungarian algorithm for `rows <= columns`: every row gets a distinct column.
///
/// Rows are added one at a time; each addition grows a tree of tight edges (reduced cost
/// `cost - u[row] - v[column]` zero) from the new row by Dijkstra-like steps, raising the
/// potentials by the smallest slack each time, until it reaches a free column, then flips the
/// path. Index 0 of the arrays is a virtual column/row that roots the tree, so real ones are
/// 1-based here.
fn hungarian(
    rows: usize,
    columns: usize,
    cost: impl Fn(usize, usize) -> f64,
) -> Vec<Option<usize>> {
    debug_assert!(rows <= columns);
    let mut row_potential = vec![0.0f64; rows + 1];
    let mut column_potential = vec![0.0f64; columns + 1];
    // row_of_column[j]: the (1-based) row holding column j, 0 when free.
    let mut row_of_column = vec![0usize; columns + 1];
    let mut previous_column = vec![0usize; columns + 1];
    for row in 1..=rows {
        row_of_column[0] = row;
        let mut column = 0;
        let mut slack = vec![f64::INFINITY; columns + 1];
        let mut in_tree = vec![false; columns + 1];
        loop {
            in_tree[column] = true;
            let tree_row = row_of_column[column];
            let mut delta = f64::INFINITY;
            let mut next_column = 0;
            for candidate in 1..=columns {
                if in_tree[candidate] {
                    continue;
                }
                let reduced = cost(tree_row - 1, candidate - 1)
                    - row_potential[tree_row]
                    - column_potential[candidate];
                if reduced < slack[candidate] {
                    slack[candidate] = reduced;
                    previous_column[candidate] = column;
                }
                if slack[candidate] < delta {
                    delta = slack[candidate];
                    next_column = candidate;
                }
            }
            for candidate in 0..=columns {
                if in_tree[candidate] {
                    row_potential[row_of_column[candidate]] += delta;
                    column_potential[candidate] -= delta;
                } else {
                    slack[candidate] -= delta;
                }
            }
            column = next_column;
            if row_of_column[column] == 0 {
                break;
            }
        }
        // Flip the augmenting path back to the root.
        while column != 0 {
            let previous = previous_column[column];
            row_of_column[column] = row_of_column[previous];
            column = previous;
        }
    }
    let mut assignment = vec![None; rows];
    for column in 1..=columns {
        if row_of_column[column] != 0 {
            assignment[row_of_column[column] - 1] = Some(column - 1);
        }
    }
    assignment
}

/// Why a role did or did not get a face.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoleMatchStatus {
    Matched,
    /// No face is similar enough to the role's references.
    BelowThreshold,
    /// Faces above the threshold exist, but other roles fit them better.
    FacesTakenByOtherRoles,
    /// The role has no reference embedding to compare with.
    NoReference,
    /// There are no faces at all.
    NoFaces,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleMatch {
    /// Index into the roles given.
    pub role: usize,
    /// Index into the faces given, when matched.
    pub face: Option<usize>,
    /// Similarity to the matched face; for an unmatched role, to its most similar face.
    pub similarity: Option<f32>,
    pub status: RoleMatchStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaceRoleMatch {
    /// One per role, in the order given.
    pub roles: Vec<RoleMatch>,
    /// Roles without a face (every status but `Matched`): to be flagged for a person.
    pub unmatched_roles: Vec<usize>,
    /// Faces no role took.
    pub unassigned_faces: Vec<usize>,
    /// `similarities[role][face]`: the best cosine similarity between the face and any of the
    /// role's references.
    pub similarities: Vec<Vec<f32>>,
}

/// Gives each role at most one face and each face at most one role.
///
/// A face's similarity to a role is its best cosine similarity to any of the role's reference
/// embeddings. Among the pairs at or above `min_similarity`, the assignment maximises the total
/// similarity (the Hungarian algorithm on negated similarities, pairs below the threshold
/// costing nothing), so two roles never fight over one face greedily: a role takes a less
/// similar face when that lets another role match at all.
pub fn match_faces_to_roles(
    face_embeddings: &[Vec<f32>],
    role_reference_embeddings: &[Vec<Vec<f32>>],
    min_similarity: f32,
) -> Result<FaceRoleMatch, AssignError> {
    if let Some(first) = face_embeddings.first() {
        let expected = first.len();
        let check = |what: String, found: usize| {
            if found == expected {
                Ok(())
            } else {
                Err(AssignError::DimensionMismatch {
                    what,
                    expected,
                    found,
                })
            }
        };
        for (face, embedding) in face_embeddings.iter().enumerate() {
            check(format!("face {face}"), embedding.len())?;
        }
        for (role, references) in role_reference_embeddings.iter().enumerate() {
            for (index, reference) in references.iter().enumerate() {
                check(format!("reference {index} of role {role}"), reference.len())?;
            }
        }
    }
    let similarities: Vec<Vec<f32>> = role_reference_embeddings
        .iter()
        .map(|references| {
            face_embeddings
                .iter()
                .map(|face| {
                    references
                        .iter()
                        .map(|reference| cosine(face, reference))
                        .fold(f32::NEG_INFINITY, f32::max)
                })
                .collect()
        })
        .collect();
    let cost: Vec<Vec<f64>> = similarities
        .iter()
        .map(|row| {
            row.iter()
                .map(|&similarity| {
                    if similarity >= min_similarity {
                        -f64::from(similarity)
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    let assignment = min_cost_assignment(&cost)?;

    let mut roles = Vec::with_capacity(role_reference_embeddings.len());
    let mut taken = vec![false; face_embeddings.len()];
    for (role, references) in role_reference_embeddings.iter().enumerate() {
        let best =
            similarities[role]
                .iter()
                .copied()
                .fold(None, |best: Option<f32>, similarity| {
                    Some(best.map_or(similarity, |best| best.max(similarity)))
                });
        let assigned = assignment[role].filter(|&face| similarities[role][face] >= min_similarity);
        let (face, similarity, status) = match assigned {
            Some(face) => {
                taken[face] = true;
                (
                    Some(face),
                    Some(similarities[role][face]),
                    RoleMatchStatus::Matched,
                )
            }
            None if references.is_empty() => (None, None, RoleMatchStatus::NoReference),
            None if face_embeddings.is_empty() => (None, None, RoleMatchStatus::NoFaces),
            None if best.is_some_and(|best| best >= min_similarity) => {
                (None, best, RoleMatchStatus::FacesTakenByOtherRoles)
            }
            None => (None, best, RoleMatchStatus::BelowThreshold),
        };
        roles.push(RoleMatch {
            role,
            face,
            similarity,
            status,
        });
    }
    Ok(FaceRoleMatch {
        unmatched_roles: roles
            .iter()
            .filter(|role| role.face.is_none())
            .map(|role| role.role)
            .collect(),
        unassigned_faces: (0..face_embeddings.len())
            .filter(|&face| !taken[face])
            .collect(),
        roles,
        similarities,
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BootstrapParams {
    /// Two clusters merge while the average similarity between their faces is at least this
    /// (SFace: the same person scores about 0.6 and more, different people 0.4 and less);
    /// a cosine, -1 to 1.
    pub link_similarity: f32,
    /// The dominant cluster must appear in at least this share of the lines that show faces;
    /// 0 to 1.
    pub min_line_share: f32,
}

impl viss_engine::range::Validate for BootstrapParams {
    fn validate(&self) -> Result<(), viss_engine::range::BadSetting> {
        use viss_engine::range::{Range, UNIT, check};
        check(
            "link_similarity",
            self.link_similarity,
            Range::new(-1.0, 1.0),
        )?;
        check("min_line_share", self.min_line_share, UNIT)
    }
}

impl Default for BootstrapParams {
    fn default() -> Self {
        Self {
            link_similarity: 0.5,
            min_line_share: 0.5,
        }
    }
}

/// A reference embedding made from the faces seen while a character speaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BootstrappedReference {
    /// Unit-length mean of the dominant cluster's faces.
    pub centroid: Vec<f32>,
    /// Lines in which the dominant cluster's person is seen.
    pub lines_covered: usize,
    /// Lines with at least one face.
    pub lines_with_faces: usize,
    pub faces_in_cluster: usize,
    pub clusters: usize,
    /// Lines covered by the next best cluster: close to `lines_covered` means two people are
    /// always seen together while this character speaks, and the choice is weak.
    pub runner_up_lines: usize,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum BootstrapError {
    #[error("no face is seen in any of the character's {lines} lines")]
    NoFaces { lines: usize },

    #[error(
        "no one is seen in enough of the character's lines: the most frequent face is in \
         {best_lines} of {lines_with_faces} lines with faces, below the required share \
         {min_line_share}"
    )]
    NoDominantCluster {
        best_lines: usize,
        lines_with_faces: usize,
        min_line_share: f32,
    },

    #[error(
        "{what} has {found} dimensions, the first face embedding has {expected}; all embeddings \
         must come from one model"
    )]
    DimensionMismatch {
        what: String,
        expected: usize,
        found: usize,
    },
}

/// The reference embedding of a character without a reference image: the faces on screen
/// during the character's lines (`line_faces[line]` = the embeddings of the faces seen in that
/// line) are clustered by average linkage, and the cluster seen in the most lines (ties: more
/// faces, then earlier) stands for the speaker, whose face is usually on screen while they talk.
///
/// Clustering is O(n³) in the number of faces, fine for the few hundred a character's lines
/// give when sampled at about one frame per line.
pub fn bootstrap_reference(
    line_faces: &[Vec<Vec<f32>>],
    params: &BootstrapParams,
) -> Result<BootstrappedReference, BootstrapError> {
    let faces: Vec<(usize, &[f32])> = line_faces
        .iter()
        .enumerate()
        .flat_map(|(line, faces)| faces.iter().map(move |face| (line, face.as_slice())))
        .collect();
    let Some(&(_, first)) = faces.first() else {
        return Err(BootstrapError::NoFaces {
            lines: line_faces.len(),
        });
    };
    for (index, (line, face)) in faces.iter().enumerate() {
        if face.len() != first.len() {
            return Err(BootstrapError::DimensionMismatch {
                what: format!("face {index} (line {line})"),
                expected: first.len(),
                found: face.len(),
            });
        }
    }
    let clusters = average_linkage(
        &faces.iter().map(|(_, face)| *face).collect::<Vec<_>>(),
        params.link_similarity,
    );
    let lines_with_faces = line_faces.iter().filter(|faces| !faces.is_empty()).count();

    let lines_of = |members: &[usize]| {
        let mut lines: Vec<usize> = members.iter().map(|&member| faces[member].0).collect();
        lines.sort_unstable();
        lines.dedup();
        lines.len()
    };
    let mut ranked: Vec<(usize, usize, usize)> = clusters
        .iter()
        .enumerate()
        .map(|(index, members)| (lines_of(members), members.len(), index))
        .collect();
    // Most lines, then most faces, then the earliest cluster.
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
    let (lines_covered, faces_in_cluster, best) = ranked[0];
    if (lines_covered as f32) < params.min_line_share * lines_with_faces as f32 {
        return Err(BootstrapError::NoDominantCluster {
            best_lines: lines_covered,
            lines_with_faces,
            min_line_share: params.min_line_share,
        });
    }
    let mut centroid = vec![0.0f32; first.len()];
    for &member in &clusters[best] {
        for (sum, value) in centroid.iter_mut().zip(faces[member].1) {
            *sum += value;
        }
    }
    viss_text::embed::l2_normalise(&mut centroid);
    Ok(BootstrappedReference {
        centroid,
        lines_covered,
        lines_with_faces,
        faces_in_cluster,
        clusters: clusters.len(),
        runner_up_lines: ranked.get(1).map_or(0, |runner_up| runner_up.0),
    })
}

/// Agglomerative clustering: repeatedly merges the two clusters with the highest average
/// pairwise cosine similarity while it is at least `link_similarity`. Returns the clusters'
/// member indices, each sorted, clusters in order of their first member.
fn average_linkage(points: &[&[f32]], link_similarity: f32) -> Vec<Vec<usize>> {
    let count = points.len();
    // similarity[a][b]: average similarity between clusters a and b (Lance-Williams update).
    let mut similarity: Vec<Vec<f64>> = (0..count)
        .map(|a| {
            (0..count)
                .map(|b| f64::from(cosine(points[a], points[b])))
                .collect()
        })
        .collect();
    let mut members: Vec<Option<Vec<usize>>> = (0..count).map(|index| Some(vec![index])).collect();
    loop {
        let mut best: Option<(f64, usize, usize)> = None;
        for a in 0..count {
            if members[a].is_none() {
                continue;
            }
            for b in a + 1..count {
                if members[b].is_none() {
                    continue;
                }
                if best.is_none_or(|(value, _, _)| similarity[a][b] > value) {
                    best = Some((similarity[a][b], a, b));
                }
            }
        }
        let Some((value, a, b)) = best.filter(|&(value, _, _)| value >= f64::from(link_similarity))
        else {
            break;
        };
        debug_assert!(value >= f64::from(link_similarity));
        let taken = members[b].take().expect("b is a live cluster");
        let (size_a, size_b) = (
            members[a].as_ref().expect("a is live").len() as f64,
            taken.len() as f64,
        );
        for other in 0..count {
            if other == a || members[other].is_none() {
                continue;
            }
            let merged =
                (size_a * similarity[a][other] + size_b * similarity[b][other]) / (size_a + size_b);
            similarity[a][other] = merged;
            similarity[other][a] = merged;
        }
        let cluster = members[a].as_mut().expect("a is live");
        cluster.extend(taken);
        cluster.sort_unstable();
    }
    members.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_force_minimum(cost: &[Vec<f64>]) -> f64 {
        let (rows, columns) = (cost.len(), cost[0].len());
        let mut best = f64::INFINITY;
        // Every injective map of the smaller side into the larger one.
        fn search(
            depth: usize,
            rows: usize,
            columns: usize,
            used: &mut Vec<bool>,
            total: f64,
            cost: &dyn Fn(usize, usize) -> f64,
            best: &mut f64,
        ) {
            if depth == rows {
                *best = best.min(total);
                return;
            }
            for column in 0..columns {
                if !used[column] {
                    used[column] = true;
                    search(
                        depth + 1,
                        rows,
                        columns,
                        used,
                        total + cost(depth, column),
                        cost,
                        best,
                    );
                    used[column] = false;
                }
            }
        }
        if rows <= columns {
            search(
                0,
                rows,
                columns,
                &mut vec![false; columns],
                0.0,
                &|r, c| cost[r][c],
                &mut best,
            );
        } else {
            search(
                0,
                columns,
                rows,
                &mut vec![false; rows],
                0.0,
                &|c, r| cost[r][c],
                &mut best,
            );
        }
        best
    }

    fn check_assignment(cost: &[Vec<f64>], assignment: &[Option<usize>]) -> f64 {
        let (rows, columns) = (cost.len(), cost[0].len());
        assert_eq!(assignment.len(), rows);
        assert_eq!(
            assignment.iter().flatten().count(),
            rows.min(columns),
            "{assignment:?}"
        );
        let mut used = vec![false; columns];
        for column in assignment.iter().flatten() {
            assert!(!used[*column], "column {column} used twice: {assignment:?}");
            used[*column] = true;
        }
        assignment
            .iter()
            .enumerate()
            .filter_map(|(row, column)| column.map(|column| cost[row][column]))
            .sum()
    }

    #[test]
    fn hungarian_matches_brute_force_on_random_matrices() {
        let mut random = fastrand::Rng::with_seed(20240527);
        for trial in 0..400 {
            let rows = random.usize(1..=6);
            let columns = random.usize(1..=6);
            // Small integer costs make ties frequent; negative ones included.
            let integers = trial % 2 == 0;
            let cost: Vec<Vec<f64>> = (0..rows)
                .map(|_| {
                    (0..columns)
                        .map(|_| {
                            if integers {
                                random.i32(-3..=5) as f64
                            } else {
                                random.f64() * 200.0 - 100.0
                            }
                        })
                        .collect()
                })
                .collect();
            let assignment = min_cost_assignment(&cost).unwrap();
            let total = check_assignment(&cost, &assignment);
            let minimum = brute_force_minimum(&cost);
            assert!(
                (total - minimum).abs() < 1e-9,
                "trial {trial}: {cost:?} gave {assignment:?} = {total}, optimum {minimum}"
            );
        }
    }

    #[test]
    fn greedy_choice_is_not_the_optimum() {
        // Row 0 prefers column 0 (cost 1), but then row 1 must pay 100; the optimum swaps them.
        let cost = vec![vec![1.0, 2.0], vec![3.0, 100.0]];
        assert_eq!(min_cost_assignment(&cost).unwrap(), vec![Some(1), Some(0)]);
    }

    #[test]
    fn empty_ragged_and_non_finite_matrices() {
        assert_eq!(
            min_cost_assignment(&[]).unwrap(),
            Vec::<Option<usize>>::new()
        );
        assert_eq!(
            min_cost_assignment(&[vec![], vec![]]).unwrap(),
            vec![None, None]
        );
        assert_eq!(
            min_cost_assignment(&[vec![1.0, 2.0], vec![1.0]]).unwrap_err(),
            AssignError::Ragged {
                row: 1,
                expected: 2,
                found: 1
            }
        );
        let error = min_cost_assignment(&[vec![1.0, f64::NAN]]).unwrap_err();
        assert!(
            matches!(
                error,
                AssignError::NotFinite {
                    row: 0,
                    column: 1,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn hungarian_handles_a_larger_matrix_quickly() {
        // 200 x 300 would take hours by brute force; check optimality through a planted
        // solution: the diagonal costs 0, everything else at least 1.
        let mut random = fastrand::Rng::with_seed(7);
        let cost: Vec<Vec<f64>> = (0..200)
            .map(|row| {
                (0..300)
                    .map(|column| {
                        if column == row + 50 {
                            0.0
                        } else {
                            1.0 + random.f64()
                        }
                    })
                    .collect()
            })
            .collect();
        let assignment = min_cost_assignment(&cost).unwrap();
        assert!(
            assignment
                .iter()
                .enumerate()
                .all(|(row, column)| *column == Some(row + 50))
        );
    }

    /// A unit vector near `centre` (a basis direction), with some noise.
    fn noisy_unit(
        random: &mut fastrand::Rng,
        centre: usize,
        dimensions: usize,
        noise: f32,
    ) -> Vec<f32> {
        let mut vector: Vec<f32> = (0..dimensions)
            .map(|_| (random.f32() - 0.5) * 2.0 * noise)
            .collect();
        vector[centre] += 1.0;
        viss_text::embed::l2_normalise(&mut vector);
        vector
    }

    #[test]
    fn roles_get_their_own_faces_and_weak_ones_are_flagged() {
        let mut random = fastrand::Rng::with_seed(3);
        let dimensions = 32;
        // Faces of people 2, 0, 1 and 7 (a stranger); roles are people 0, 1, 2 and 5.
        let faces: Vec<Vec<f32>> = [2, 0, 1, 7]
            .iter()
            .map(|&p| noisy_unit(&mut random, p, dimensions, 0.12))
            .collect();
        let roles: Vec<Vec<Vec<f32>>> = [0, 1, 2, 5]
            .iter()
            .map(|&p| {
                (0..2)
                    .map(|_| noisy_unit(&mut random, p, dimensions, 0.12))
                    .collect()
            })
            .collect();
        let result = match_faces_to_roles(&faces, &roles, 0.5).unwrap();
        let assigned: Vec<Option<usize>> = result.roles.iter().map(|role| role.face).collect();
        assert_eq!(assigned, vec![Some(1), Some(2), Some(0), None]);
        assert_eq!(result.roles[3].status, RoleMatchStatus::BelowThreshold);
        assert!(result.roles[3].similarity.unwrap() < 0.5);
        assert_eq!(result.unmatched_roles, vec![3]);
        assert_eq!(result.unassigned_faces, vec![3]);
        assert!(
            result.roles[..3]
                .iter()
                .all(|role| role.status == RoleMatchStatus::Matched
                    && role.similarity.unwrap() > 0.8)
        );
    }

    #[test]
    fn a_contested_face_goes_where_the_total_is_best() {
        // Role 0 is most similar to face 0 (0.85) and also fits face 1 (0.53); role 1 fits only
        // face 0 (0.80). Taking the best pair first would leave role 1 without a face; the
        // optimum gives role 0 face 1 and role 1 face 0.
        let faces = vec![vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 0.0]];
        let role0 = vec![vec![0.95, 0.6, 0.0]];
        let role1 = vec![vec![0.8, 0.0, 0.6]];
        let result = match_faces_to_roles(&faces, &[role0, role1], 0.5).unwrap();
        assert!(
            result.similarities[0][0] > result.similarities[1][0],
            "{:?}",
            result.similarities
        );
        assert_eq!(result.roles[0].face, Some(1));
        assert_eq!(result.roles[1].face, Some(0));
        // With one face only, the losing role is told the face went to someone else.
        let result = match_faces_to_roles(
            &faces[..1],
            &[vec![vec![0.9, 0.1, 0.0]], vec![vec![0.8, 0.0, 0.6]]],
            0.5,
        )
        .unwrap();
        assert_eq!(result.roles[0].status, RoleMatchStatus::Matched);
        assert_eq!(
            result.roles[1].status,
            RoleMatchStatus::FacesTakenByOtherRoles
        );
        assert_eq!(result.unmatched_roles, vec![1]);
    }

    #[test]
    fn roles_without_references_or_faces_say_so() {
        let result = match_faces_to_roles(&[vec![1.0, 0.0]], &[vec![]], 0.5).unwrap();
        assert_eq!(result.roles[0].status, RoleMatchStatus::NoReference);
        let result = match_faces_to_roles(&[], &[vec![vec![1.0, 0.0]]], 0.5).unwrap();
        assert_eq!(result.roles[0].status, RoleMatchStatus::NoFaces);
        assert_eq!(result.unmatched_roles, vec![0]);
        let error =
            match_faces_to_roles(&[vec![1.0, 0.0]], &[vec![vec![1.0, 0.0, 0.0]]], 0.5).unwrap_err();
        assert!(
            error.to_string().contains("reference 0 of role 0"),
            "{error}"
        );
    }

    #[test]
    fn bootstrap_takes_the_person_seen_in_most_lines() {
        let mut random = fastrand::Rng::with_seed(11);
        let dimensions = 64;
        // The speaker (person 4) is seen in 8 of 10 lines; person 9 in 5, person 1 in 3, and
        // in two lines only others are on screen. Person 9 is seen more often per line (two
        // frames), so counting faces instead of lines would pick the wrong person.
        let mut lines: Vec<Vec<Vec<f32>>> = Vec::new();
        for line in 0..10 {
            let mut faces = Vec::new();
            if line < 8 {
                faces.push(noisy_unit(&mut random, 4, dimensions, 0.1));
            }
            if line % 2 == 0 {
                faces.push(noisy_unit(&mut random, 9, dimensions, 0.1));
                faces.push(noisy_unit(&mut random, 9, dimensions, 0.1));
            }
            if line >= 7 {
                faces.push(noisy_unit(&mut random, 1, dimensions, 0.1));
            }
            lines.push(faces);
        }
        lines.push(Vec::new());
        let reference = bootstrap_reference(&lines, &BootstrapParams::default()).unwrap();
        assert_eq!(reference.lines_covered, 8);
        assert_eq!(reference.lines_with_faces, 10);
        assert_eq!(reference.faces_in_cluster, 8);
        assert_eq!(reference.clusters, 3);
        assert_eq!(reference.runner_up_lines, 5);
        let speaker = noisy_unit(&mut random, 4, dimensions, 0.0);
        assert!(
            cosine(&reference.centroid, &speaker) > 0.95,
            "{}",
            cosine(&reference.centroid, &speaker)
        );
        let norm: f32 = reference.centroid.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
    }

    #[test]
    fn bootstrap_refuses_without_a_dominant_face() {
        let mut random = fastrand::Rng::with_seed(5);
        // Four lines, a different person in each.
        let lines: Vec<Vec<Vec<f32>>> = (0..4)
            .map(|p| vec![noisy_unit(&mut random, p, 16, 0.1)])
            .collect();
        let error = bootstrap_reference(&lines, &BootstrapParams::default()).unwrap_err();
        assert_eq!(
            error,
            BootstrapError::NoDominantCluster {
                best_lines: 1,
                lines_with_faces: 4,
                min_line_share: 0.5
            }
        );
        assert_eq!(
            bootstrap_reference(&[vec![], vec![]], &BootstrapParams::default()).unwrap_err(),
            BootstrapError::NoFaces { lines: 2 }
        );
    }
}
