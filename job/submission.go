package job

// SubmissionDoc is a job as a user writes it: the fields of a submission and none of the
// server-owned ones (uuid, state, restart info). `POST convert` and the portal's Clone answer
// with it, so what they give can be submitted again as it is.
type SubmissionDoc struct {
	Name                  string  `json:"name"`
	Description           string  `json:"description,omitempty"`
	DeploymentEnvironment string  `json:"deploymentEnvironment,omitempty"`
	Request               Request `json:"request"`
	Owner                 *Owner  `json:"owner,omitempty"`
}

// Submission returns the submission form of a job. Only the project is kept of the owner: the
// user is always taken from authentication.
func Submission(j *Job) SubmissionDoc {
	d := SubmissionDoc{Name: j.Name, Description: j.Description, DeploymentEnvironment: j.DeploymentEnvironment, Request: j.Request}
	if j.Owner.ProjectURN != "" {
		d.Owner = &Owner{ProjectURN: j.Owner.ProjectURN}
	}
	return d
}
